package aipo.jobserver;

import org.apache.beam.runners.spark.SparkJobInvoker;
import org.apache.beam.runners.spark.SparkJobServerDriver;
import org.kohsuke.args4j.CmdLineException;
import org.kohsuke.args4j.CmdLineParser;

/**
 * Beam's Spark job server on 127.0.0.1; takes SparkJobServerDriver's flags (--spark-master-url
 * local[N] runs Spark inside this process).
 */
public final class Spark {
  private Spark() {}

  public static void main(String[] args) {
    SparkJobServerDriver.SparkServerConfiguration config =
        new SparkJobServerDriver.SparkServerConfiguration();
    CmdLineParser parser = new CmdLineParser(config);
    try {
      parser.parseArgument(args);
    } catch (CmdLineException e) {
      System.err.println("spark job server: " + e.getMessage());
      parser.printUsage(System.err);
      System.exit(2);
    }
    new LoopbackJobServer(config, () -> SparkJobInvoker.create(config)).run();
  }
}
