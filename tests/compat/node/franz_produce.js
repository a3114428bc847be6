// franz-kafka 0.7.5 producer: writes the payloads to a topic through the Topic stream API.
//   stdin:  {"payloads": [base64, ...]}
//   args:   --port P --topic T [--compression none|gzip|snappy] [--batch-size B]
//           [--partitions N  (broker 0 holds N partitions: franz spreads batches over them)]
//   stdout: {"written": count}
// franz-kafka produces without acknowledgements (0.7 has none): the script ends once every
// batch has been handed to the socket and the connection is closed cleanly; the test then
// reads the broker to see what arrived.
'use strict'
const { args, readStdinJson, done, fail, deadline, quietLogger } = require('./common')
const Kafka = require('franz-kafka')

const a = args()
const payloads = (readStdinJson().payloads || []).map((b) => Buffer.from(b, 'base64'))
const batchSize = +(a['batch-size'] || 10)
let written = 0
deadline(+(a['timeout-ms'] || 20000), () => ({ written }))

const kafka = new Kafka({
  brokers: [{ id: 0, host: '127.0.0.1', port: +a.port }],
  compression: a.compression || 'none',
  queueTime: 20,
  batchSize: batchSize,
  logger: quietLogger(),
})

// Close the connections and wait until the sockets have flushed and closed before exiting.
function closeThenDone() {
  const sockets = kafka.allBrokers.all().map((b) => b.client.connection).filter(Boolean)
  let open = sockets.length
  if (open === 0) return done({ written })
  sockets.forEach((s) => s.once('close', () => { if (--open === 0) done({ written }) }))
  kafka.close()
}

kafka.connect(function () {
  const topic = kafka.topic(a.topic, { partitions: { produce: ['0:' + (a.partitions || '1')] } })
  topic.on('error', (err) => fail('franz-kafka topic error: ' + (err && err.message)))
  // Observe (not change) each batch the client writes, to know when all are on the socket.
  const partitions = topic.partitions
  const write = partitions.write.bind(partitions)
  partitions.write = function (messages, cb) {
    write(messages, function (err) {
      cb(err)
      if (err) return fail('franz-kafka produce error: ' + (err.message || err))
      written += messages.length
      if (written === payloads.length) closeThenDone()
    })
  }
  if (payloads.length === 0) return closeThenDone()
  for (const p of payloads) topic.write(p)
})
