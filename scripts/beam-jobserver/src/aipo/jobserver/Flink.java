package aipo.jobserver;

import org.apache.beam.runners.flink.FlinkJobInvoker;
import org.apache.beam.runners.flink.FlinkJobServerDriver;

/** Beam's Flink job server on 127.0.0.1; takes FlinkJobServerDriver's flags. */
public final class Flink {
  private Flink() {}

  public static void main(String[] args) {
    FlinkJobServerDriver.FlinkServerConfiguration config = FlinkJobServerDriver.parseArgs(args);
    new LoopbackJobServer(config, () -> FlinkJobInvoker.create(config)).run();
  }
}
