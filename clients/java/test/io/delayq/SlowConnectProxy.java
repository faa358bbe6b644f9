package io.delayq;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.util.ArrayList;
import java.util.List;

/**
 * A TCP forwarder to the real service whose first connect fails: its
 * listen queue is kept full (the kernel drops the SYN, the client's connect
 * times out) until {@code openAfterMs}, then it accepts and forwards every
 * connection. The client's retried connect gets through: a request that was
 * never sent before, so its answer is the server's own.
 */
final class SlowConnectProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final List<Socket> fillers = new ArrayList<>();
    private final Thread acceptor;

    SlowConnectProxy(String serviceUrl, long openAfterMs) throws IOException {
        URI target = URI.create(serviceUrl);
        listener = new ServerSocket(0, 1, InetAddress.getLoopbackAddress());
        fillQueue();
        acceptor = new Thread(() -> serve(target, openAfterMs), "slow-connect-proxy");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    String url() {
        return "http://127.0.0.1:" + listener.getLocalPort();
    }

    /** Connects until one connect times out: the listen queue is full. */
    private void fillQueue() throws IOException {
        for (int i = 0; i < 16; i++) {
            Socket s = new Socket();
            try {
                s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), listener.getLocalPort()), 200);
                fillers.add(s);
            } catch (IOException full) {
                s.close();
                return;
            }
        }
        throw new IOException("the listen queue never filled");
    }

    private void serve(URI target, long openAfterMs) {
        try {
            Thread.sleep(openAfterMs);
            for (Socket s : fillers) {
                s.close();
            }
            while (true) {
                Socket in = listener.accept();
                if (fillers.stream().anyMatch(f -> sameEnds(f, in))) {
                    in.close();   // a filler's queued connection
                    continue;
                }
                Socket out = new Socket(target.getHost(), target.getPort());
                pipe(in, out);
                pipe(out, in);
            }
        } catch (IOException | InterruptedException e) {
            // closed
        }
    }

    private static boolean sameEnds(Socket filler, Socket accepted) {
        return filler.getLocalPort() == accepted.getPort();
    }

    private static void pipe(Socket from, Socket to) {
        Thread t = new Thread(() -> {
            try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
                in.transferTo(out);
            } catch (IOException e) {
                // one side closed
            } finally {
                try {
                    to.shutdownOutput();
                } catch (IOException e) {
                    // closed already
                }
            }
        }, "slow-connect-proxy-pipe");
        t.setDaemon(true);
        t.start();
    }

    @Override
    public void close() throws IOException {
        listener.close();
    }
}
