// Confluent Parallel Consumer 0.5.3.3 as a peer of `cargo xtask bench` (see ../../../../../README.md).
//
// Key-ordered (ordering KEY), with the shared retry policy through its retry-delay provider (base
// 1 ms, factor 2, cap 100 ms, full jitter, in place of the 1 s default delay) and the shared
// handler: a record fails on its first attempt when fnv1a64(event-id) % failMod == 0
// (orderly_benches::workload); with --permanent-mod M, one with fnv1a64 % M == M - 1 is written to
// the dead-letter topic from the handler (acks=all, waiting for the acknowledgement). It writes the
// shared handler log (orderly_benches::verify) and prints READY once partitions are assigned.
//
// Parallel Consumer's own settings keep the library's defaults unless given: --max-concurrency
// (default 16), --batch-size (1), --commit-mode (PERIODIC_CONSUMER_ASYNCHRONOUS),
// --commit-interval-ms, --eager-processing-during-commit (false; the transactional mode's
// allowEagerProcessingDuringTransactionCommit), and the Kafka consumer's --max-poll-records (500).
// With a batch size above 1 the handler gets several records (of different keys) per call and handles them in order; a
// failure fails the whole batch, which Parallel Consumer then retries as a whole, so batches are
// only meaningful where nothing fails.
//
// With --reply-topic T (the reply scenarios; batch size 1) the handler runs under pollAndProduce and
// answers each record it completes with one reply (key: the record's key, the session id; value: its event id)
// to T, which Parallel Consumer produces. With --commit-mode PERIODIC_TRANSACTIONAL_PRODUCER the
// producer gets the transactional id `<group>.txn`, and Parallel Consumer commits the replies and
// the offsets in one transaction per commit interval (its transactional mode).
package orderly.bench;

import io.confluent.parallelconsumer.PCRetriableException;
import io.confluent.parallelconsumer.ParallelConsumerOptions;
import io.confluent.parallelconsumer.ParallelConsumerOptions.ProcessingOrder;
import io.confluent.parallelconsumer.ParallelStreamProcessor;
import io.confluent.parallelconsumer.RecordContext;
import java.io.BufferedWriter;
import java.lang.management.ManagementFactory;
import java.io.FileWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
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
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public final class PcPeer {
    /** The shared failure-injection hash: FNV-1a, 64 bits (compare as unsigned). */
    static long fnv1a64(byte[] data) {
        long h = 0xcbf29ce484222325L;
        for (byte b : data) {
            h ^= (b & 0xff);
            h *= 0x100000001b3L;
        }
        return h;
    }

    /** The shared retry policy: full jitter over min(100 ms, 1 ms * 2^(n-1)) before retry n. */
    static Duration backoff(int retry) {
        double ceilNanos = Math.min(100_000_000.0, 1_000_000.0 * Math.pow(2.0, retry - 1));
        return Duration.ofNanos((long) (ThreadLocalRandom.current().nextDouble() * ceilNanos));
    }

    static long nowUs() {
        java.time.Instant t = java.time.Instant.now();
        return t.getEpochSecond() * 1_000_000L + t.getNano() / 1_000;
    }

    static byte[] header(ConsumerRecord<byte[], byte[]> r, String name) {
        Header h = r.headers().lastHeader(name);
        return h == null || h.value() == null ? new byte[0] : h.value();
    }

    /** CPU time this process used so far, every thread (JIT and GC included), in µs. */
    static long cpuUs() {
        return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
                .getProcessCpuTime() / 1000;
    }

    static long peakRssKib() {
        try {
            for (String l : Files.readAllLines(Path.of("/proc/self/status"))) {
                if (l.startsWith("VmHWM:")) {
                    return Long.parseLong(l.split("\\s+")[1]);
                }
            }
        } catch (Exception e) {
            // no /proc: report 0
        }
        return 0;
    }

    /** The shared handler for one record; throws to fail it (and the rest of its batch). */
    static void handle(RecordContext<byte[], byte[]> rc, long workUs, long failMod, long permanentMod,
            KafkaProducer<byte[], byte[]> producer, String dlqTopic, byte[] stallBytes, long stallFrom,
            long stallUntil, AtomicLong firstUs, BufferedWriter log, boolean logFlush) {
        ConsumerRecord<byte[], byte[]> r = rc.getConsumerRecord();
        int attempt = rc.getNumberOfFailedAttempts() + 1;
        if (workUs > 0) {
            try {
                Thread.sleep(workUs / 1000, (int) (workUs % 1000) * 1000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        byte[] id = header(r, "event-id");
        long h = fnv1a64(id);
        if (attempt == 1 && failMod != 0 && Long.remainderUnsigned(h, failMod) == 0) {
            throw new PCRetriableException("injected");
        }
        if (permanentMod != 0 && Long.remainderUnsigned(h, permanentMod) == permanentMod - 1) {
            try {
                producer.send(new ProducerRecord<>(dlqTopic, null, r.key(), r.value(), r.headers())).get();
            } catch (Exception e) {
                throw new PCRetriableException("dead-letter write failed", e);
            }
        }
        if (stallBytes.length > 0 && java.util.Arrays.equals(r.key(), stallBytes)) {
            long since = (nowUs() - firstUs.get()) / 1000;
            if (since >= stallFrom && since < stallUntil) {
                throw new PCRetriableException("stalled");
            }
        }
        String line = new String(r.key(), StandardCharsets.UTF_8) + " "
                + new String(header(r, "seq"), StandardCharsets.UTF_8) + " "
                + new String(id, StandardCharsets.UTF_8) + " "
                + attempt + " " + r.timestamp() + " " + nowUs() + "\n";
        synchronized (log) {
            try {
                log.write(line);
                if (logFlush) {
                    log.flush();
                }
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        }
    }

    public static void main(String[] argv) throws Exception {
        Map<String, String> a = new HashMap<>();
        for (int i = 0; i + 1 < argv.length; i += 2) {
            a.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        String bootstrap = a.getOrDefault("bootstrap", System.getenv("ORDERLY_BOOTSTRAP"));
        String topic = a.get("topic");
        String group = a.get("group");
        String dlqTopic = a.getOrDefault("dlq-topic", group + ".dlq");
        long records = Long.parseLong(a.get("records"));
        long failMod = Long.parseLong(a.getOrDefault("fail-mod", "10"));
        long permanentMod = Long.parseLong(a.getOrDefault("permanent-mod", "0"));
        long workUs = Long.parseLong(a.getOrDefault("work-us", "0"));
        String concurrency = a.get("max-concurrency");
        String batchSize = a.get("batch-size");
        String commitMode = a.get("commit-mode");
        String commitIntervalMs = a.get("commit-interval-ms");
        String maxPollRecords = a.get("max-poll-records");
        String logPath = a.get("log");
        boolean logFlush = Boolean.parseBoolean(a.getOrDefault("log-flush", "false"));
        String stallKey = a.getOrDefault("stall-session", "");
        long stallFrom = Long.parseLong(a.getOrDefault("stall-after-ms", "0"));
        long stallUntil = stallFrom + Long.parseLong(a.getOrDefault("stall-for-ms", "0"));
        String sessionTimeoutMs = a.get("session-timeout-ms");
        String replyTopic = a.get("reply-topic");
        String eagerDuringCommit = a.get("eager-processing-during-commit");

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        if (sessionTimeoutMs != null) {
            cp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, Integer.parseInt(sessionTimeoutMs));
        }
        if (maxPollRecords != null) {
            cp.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, Integer.parseInt(maxPollRecords));
        }
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.ACKS_CONFIG, "all");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class);
        if (commitMode != null && ParallelConsumerOptions.CommitMode.valueOf(commitMode)
                == ParallelConsumerOptions.CommitMode.PERIODIC_TRANSACTIONAL_PRODUCER) {
            pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group + ".txn");
        }
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp);
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(pp);

        ParallelConsumerOptions.ParallelConsumerOptionsBuilder<byte[], byte[]> builder =
                ParallelConsumerOptions.<byte[], byte[]>builder()
                        .ordering(ProcessingOrder.KEY)
                        .consumer(consumer)
                        .producer(producer)
                        .retryDelayProvider((RecordContext<byte[], byte[]> ctx) -> backoff(ctx.getNumberOfFailedAttempts()));
        if (concurrency != null) {
            builder.maxConcurrency(Integer.parseInt(concurrency));
        }
        if (batchSize != null) {
            builder.batchSize(Integer.parseInt(batchSize));
        }
        if (commitMode != null) {
            builder.commitMode(ParallelConsumerOptions.CommitMode.valueOf(commitMode));
        }
        if (commitIntervalMs != null) {
            builder.commitInterval(Duration.ofMillis(Long.parseLong(commitIntervalMs)));
        }
        if (eagerDuringCommit != null) {
            builder.allowEagerProcessingDuringTransactionCommit(Boolean.parseBoolean(eagerDuringCommit));
        }
        ParallelConsumerOptions<byte[], byte[]> options = builder.build();
        ParallelStreamProcessor<byte[], byte[]> pc = ParallelStreamProcessor.createEosStreamProcessor(options);

        AtomicLong firstUs = new AtomicLong(0);
        AtomicLong firstCpuUs = new AtomicLong(0);
        AtomicLong completed = new AtomicLong(0);
        CountDownLatch done = new CountDownLatch(1);
        // The log is streamed as records complete (nothing kept in memory); with log-flush every
        // line is written out before the handler returns (S6: the process is killed with SIGKILL).
        BufferedWriter log = new BufferedWriter(new FileWriter(logPath, StandardCharsets.UTF_8), 1 << 20);
        byte[] stallBytes = stallKey.getBytes(StandardCharsets.UTF_8);
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
        if (replyTopic == null) {
            pc.poll(ctx -> {
                if (firstUs.get() == 0 && firstUs.compareAndSet(0, nowUs())) {
                    firstCpuUs.set(cpuUs());
                }
                for (RecordContext<byte[], byte[]> rc : ctx) {
                    handle(rc, workUs, failMod, permanentMod, producer, dlqTopic, stallBytes, stallFrom, stallUntil,
                            firstUs, log, logFlush);
                    if (completed.incrementAndGet() >= records) {
                        done.countDown();
                    }
                }
            });
        } else {
            // One record per call (batch size 1, the default): its one reply.
            pc.pollAndProduce(ctx -> {
                if (firstUs.get() == 0 && firstUs.compareAndSet(0, nowUs())) {
                    firstCpuUs.set(cpuUs());
                }
                RecordContext<byte[], byte[]> rc = ctx.getSingleRecord();
                handle(rc, workUs, failMod, permanentMod, producer, dlqTopic, stallBytes, stallFrom, stallUntil,
                        firstUs, log, logFlush);
                if (completed.incrementAndGet() >= records) {
                    done.countDown();
                }
                ConsumerRecord<byte[], byte[]> r = rc.getConsumerRecord();
                return new ProducerRecord<>(replyTopic, r.key(), header(r, "event-id"));
            });
        }
        done.await();
        pc.close(); // drains and commits the final offsets
        long end = nowUs();
        producer.close();
        long cpu = cpuUs() - firstCpuUs.get();

        synchronized (log) {
            log.write("# system=" + (replyTopic == null ? "parallel-consumer" : "parallel-consumer-replies")
                    + " first_us=" + firstUs.get() + " end_us=" + end
                    + " rss_kib=" + peakRssKib() + " cpu_us=" + cpu + "\n");
            log.close();
        }
        System.exit(0);
    }
}
