package aipo.jobserver;

import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.beam.model.pipeline.v1.Endpoints;
import org.apache.beam.sdk.fn.server.GrpcContextHeaderAccessorProvider;
import org.apache.beam.sdk.fn.server.ServerFactory;
import org.apache.beam.vendor.grpc.v1p60p1.io.grpc.BindableService;
import org.apache.beam.vendor.grpc.v1p60p1.io.grpc.Server;
import org.apache.beam.vendor.grpc.v1p60p1.io.grpc.ServerInterceptors;
import org.apache.beam.vendor.grpc.v1p60p1.io.grpc.netty.NettyServerBuilder;

/**
 * A gRPC server factory that listens on the loopback interface only.
 *
 * <p>Beam's default factory builds its servers with {@code NettyServerBuilder.forPort}, which
 * listens on every interface whatever {@code --job-host} says. The job server's job and artifact
 * services are unauthenticated, so on a machine that is not a cluster node they must not be
 * reachable from outside: this factory binds the address it is given, or 127.0.0.1.
 */
final class LoopbackServerFactory extends ServerFactory {
  private final int port;

  /** port is the port to listen on; 0 lets the kernel pick one. */
  LoopbackServerFactory(int port) {
    this.port = port;
  }

  @Override
  public Server allocateAddressAndCreate(
      List<BindableService> services, Endpoints.ApiServiceDescriptor.Builder descriptor)
      throws IOException {
    InetSocketAddress address = new InetSocketAddress(InetAddress.getLoopbackAddress(), port);
    Server server = start(services, address);
    descriptor.setUrl(address.getHostString() + ":" + server.getPort());
    return server;
  }

  @Override
  public Server create(List<BindableService> services, Endpoints.ApiServiceDescriptor descriptor)
      throws IOException {
    String url = descriptor.getUrl();
    int colon = url.lastIndexOf(':');
    if (colon < 0) {
      throw new IOException("endpoint " + url + " is not host:port");
    }
    InetAddress host = InetAddress.getByName(url.substring(0, colon));
    if (!host.isLoopbackAddress()) {
      throw new IOException(
          "endpoint " + url + " is not a loopback address; this job server listens on 127.0.0.1 only");
    }
    return start(services, new InetSocketAddress(host, Integer.parseInt(url.substring(colon + 1))));
  }

  private static Server start(List<BindableService> services, InetSocketAddress address)
      throws IOException {
    NettyServerBuilder builder =
        NettyServerBuilder.forAddress(address)
            // The same limits Beam's own factory sets: pipelines and staged
            // artifacts arrive as single messages of any size, and clients
            // ping every 20 seconds at most.
            .maxInboundMessageSize(Integer.MAX_VALUE)
            .permitKeepAliveTime(20, TimeUnit.SECONDS);
    for (BindableService service : services) {
      builder.addService(
          ServerInterceptors.intercept(service, GrpcContextHeaderAccessorProvider.interceptor()));
    }
    return builder.build().start();
  }
}
