// Reads a topic as Apache Kafka's own consumer sees it with isolation.level=read_committed, from
// the beginning up to every partition's end offset as of the start (for read_committed the last
// stable offset: everything committed before the first transaction still open), then exits.
// Prints `key TAB value` per record (`null` for a missing key or value, as the console consumer
// does), or with `headers` its headers as `name:value,name:value` (the console consumer's
// `print.headers` form; `NO_HEADERS` for none), each partition's records in offset order.
//
//   java -cp '<kafka libs>/*' ReadCommitted.java BOOTSTRAP TOPIC TIMEOUT_MS [headers]
//
// Unlike the console consumer's `--timeout-ms`, nothing here depends on how soon records come: the
// end is known before the first fetch. It exits 2 if the end is not reached within TIMEOUT_MS.

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ReadCommitted {
    public static void main(String[] args) throws Exception {
        if (args.length != 3 && !(args.length == 4 && args[3].equals("headers"))) {
            System.err.println("usage: ReadCommitted BOOTSTRAP TOPIC TIMEOUT_MS [headers]");
            System.exit(2);
        }
        String topic = args[1];
        boolean headers = args.length == 4;
        long deadline = System.currentTimeMillis() + Long.parseLong(args[2]);
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("isolation.level", "read_committed");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> partitions = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(60))) {
                partitions.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            Map<TopicPartition, Long> end = consumer.endOffsets(partitions, Duration.ofSeconds(60));
            while (true) {
                boolean done = true;
                for (TopicPartition tp : partitions) {
                    if (consumer.position(tp, Duration.ofSeconds(60)) < end.get(tp)) {
                        done = false;
                    }
                }
                if (done) {
                    break;
                }
                if (System.currentTimeMillis() > deadline) {
                    out.flush();
                    System.err.println("ReadCommitted: the end offsets " + end + " were not reached in time");
                    System.exit(2);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    if (headers) {
                        StringBuilder line = new StringBuilder();
                        for (Header h : r.headers()) {
                            if (line.length() > 0) {
                                line.append(',');
                            }
                            line.append(h.key()).append(':').append(text(h.value()));
                        }
                        out.println(line.length() > 0 ? line : "NO_HEADERS");
                    } else {
                        out.print(text(r.key()));
                        out.print('\t');
                        out.println(text(r.value()));
                    }
                }
            }
        }
        out.flush();
    }

    private static String text(byte[] b) {
        return b == null ? "null" : new String(b, StandardCharsets.UTF_8);
    }
}
