// Writes a fixed sequence of transactional and plain records with Apache Kafka's own Java producer, for
// crates/protocol/tests/broker/txn.rs. Run as a single-file program (Java 11+):
//   java -cp '<kafka dist>/lib/*' TxProducer.java <bootstrap> <topic>
// Every send is awaited, so the log layout of partition 0 is exact:
//   0 plain p0 | 1 c1-0, 2 c1-1 (txn 1), 3 COMMIT | 4 a-0 (txn 2), 5 plain p1, 6 a-1 (txn 2), 7 ABORT
//   | 8 c3-0, 9 c3-1 (txn 3), 10 COMMIT
// Each record carries a header "src" naming its producer ("txn" or "plain").
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxProducer {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        Properties common = new Properties();
        common.put("bootstrap.servers", bootstrap);
        common.put("key.serializer", StringSerializer.class.getName());
        common.put("value.serializer", StringSerializer.class.getName());
        common.put("acks", "all");
        common.put("linger.ms", "0");

        Properties txProps = new Properties();
        txProps.putAll(common);
        txProps.put("transactional.id", "orderly-txn-test-" + topic);

        try (KafkaProducer<String, String> tx = new KafkaProducer<>(txProps);
             KafkaProducer<String, String> plain = new KafkaProducer<>(common)) {
            tx.initTransactions();

            send(plain, topic, "p0", "plain");

            tx.beginTransaction();
            send(tx, topic, "c1-0", "txn");
            send(tx, topic, "c1-1", "txn");
            tx.commitTransaction();

            tx.beginTransaction();
            send(tx, topic, "a-0", "txn");
            send(plain, topic, "p1", "plain");
            send(tx, topic, "a-1", "txn");
            tx.abortTransaction();

            tx.beginTransaction();
            send(tx, topic, "c3-0", "txn");
            send(tx, topic, "c3-1", "txn");
            tx.commitTransaction();
        }
        System.out.println("done");
    }

    static void send(KafkaProducer<String, String> p, String topic, String key, String src) throws Exception {
        ProducerRecord<String, String> r = new ProducerRecord<>(topic, 0, key, "value-" + key);
        r.headers().add("src", src.getBytes(StandardCharsets.UTF_8));
        RecordMetadata m = p.send(r).get();
        System.out.println(key + "@" + m.offset());
    }
}
