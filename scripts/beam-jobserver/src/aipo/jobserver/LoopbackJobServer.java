package aipo.jobserver;

import org.apache.beam.runners.jobsubmission.JobServerDriver;

/**
 * Beam's job server (job API and artifact staging) with both services on the loopback
 * interface. The runner is chosen by the invoker factory: see {@link Flink} and {@link Spark}.
 */
final class LoopbackJobServer extends JobServerDriver {
  LoopbackJobServer(ServerConfiguration config, JobInvokerFactory invokers) {
    super(
        config,
        new LoopbackServerFactory(config.getPort()),
        new LoopbackServerFactory(config.getArtifactPort()),
        invokers);
  }
}
