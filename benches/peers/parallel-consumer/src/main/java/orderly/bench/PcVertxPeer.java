// Confluent Parallel Consumer 0.5.3.3's Vert.x module as a peer of the HTTP scenarios of
// `cargo xtask bench` (see ../../../../../README.md).
//
// Ordering KEY; each record is POSTed with the module's WebClient (vertxHttpWebClient) to the shared
// endpoint (`bench-http-server`), with the headers of `orderly consume --http` (orderly-session,
// orderly-timestamp, orderly-attempt, kafka-h-event-id, kafka-h-seq) and the value as body. Vert.x
// counts any answer as a success, so the returned future is failed unless the status is 2xx: the
// module then fails the record and Parallel Consumer retries it after the shared retry policy's
// delay (base 1 ms, factor 2, cap 100 ms, full jitter, through its retry-delay provider). The
// endpoint, not this program, decides which records fail and checks order, so this peer keeps no
// handler log; it counts successes and closes (draining and committing) once it has as many as
// --records. --max-concurrency sets maxConcurrency (unset: the library's default, 16); the module
// sizes Vert.x's connection pool to it. It prints READY once partitions are assigned.
package orderly.bench;

import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.RecordContext;
import io.confluent.parallelconsumer.vertx.VertxParallelStreamProcessor;
import io.vertx.core.Future;
import io.vertx.core.buffer.Buffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class PcVertxPeer {
    /** The shared retry policy: full jitter over min(100 ms, 1 ms * 2^(n-1)) before retry n. */
    static Duration backoff(int retry) {
        double ceilNanos = Math.min(100_000_000.0, 1_000_000.0 * Math.pow(2.0, retry - 1));
        return Duration.ofNanos((long) (ThreadLocalRandom.current().nextDouble() * ceilNanos));
    }

    static String header(ConsumerRecord<byte[], byte[]> r, String name) {
        Header h = r.headers().lastHeader(name);
        return h == null || h.value() == null ? "" : new String(h.value(), StandardCharsets.UTF_8);
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String bootstrap = a.getOrDefault("bootstrap", System.getenv("ORDERLY_BOOTSTRAP"));
        String topic = a.get("topic");
        String group = a.get("group");
        String url = a.get("http");
        long records = Long.parseLong(a.get("records"));
        String concurrency = a.get("max-concurrency");

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);

        var builder = ParallelConsumerOptions.<byte[], byte[]>builder()
                .ordering(ProcessingOrder.KEY)
                .consumer(consumer)
                .retryDelayProvider((RecordContext<byte[], byte[]> ctx) -> backoff(ctx.getNumberOfFailedAttempts()));
        if (concurrency != null) {
            builder = builder.maxConcurrency(Integer.parseInt(concurrency));
        }
        VertxParallelStreamProcessor<byte[], byte[]> pc =
                VertxParallelStreamProcessor.createEosStreamProcessor(builder.build());

        AtomicLong completed = new AtomicLong(0);
        CountDownLatch done = new CountDownLatch(1);
        CountDownLatch ready = new CountDownLatch(1);
        pc.subscribe(List.of(topic), new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                if (!partitions.isEmpty() && ready.getCount() > 0) {
                    ready.countDown();
                    System.out.println("READY");
                    System.out.flush();
                }
            }
        });
        pc.vertxHttpWebClient((client, ctx) -> {
            RecordContext<byte[], byte[]> rc = ctx.getSingleRecord();
            ConsumerRecord<byte[], byte[]> r = rc.getConsumerRecord();
            int attempt = rc.getNumberOfFailedAttempts() + 1;
            return client.postAbs(url)
                    .putHeader("content-type", "application/octet-stream")
                    .putHeader("orderly-session", new String(r.key(), StandardCharsets.UTF_8))
                    .putHeader("orderly-timestamp", Long.toString(r.timestamp()))
                    .putHeader("orderly-attempt", Integer.toString(attempt))
                    .putHeader("kafka-h-event-id", header(r, "event-id"))
                    .putHeader("kafka-h-seq", header(r, "seq"))
                    .sendBuffer(Buffer.buffer(r.value() == null ? new byte[0] : r.value()))
                    .compose(resp -> {
                        if (resp.statusCode() / 100 != 2) {
                            return Future.failedFuture("HTTP " + resp.statusCode());
                        }
                        if (completed.incrementAndGet() >= records) {
                            done.countDown();
                        }
                        return Future.succeededFuture(resp);
                    });
        }, sent -> {});
        done.await();
        pc.close(); // drains and commits the final offsets
        System.exit(0);
    }
}
