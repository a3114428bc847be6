// franz-kafka 0.7.5 consumer: reads a topic through the Topic stream API ('data' events).
//   args:   --port P --topic T --count N [--from "0-0:0,0-1:0" (brokerId-partition:offset)]
//           [--max-fetch-size BYTES] [--linger-ms MS] [--timeout-ms MS]
//   stdout: {"messages": [base64, ...]} in the order the client emitted them
// After N messages it keeps polling for --linger-ms more, so that extra (duplicated)
// deliveries show up in the result instead of going unnoticed.
'use strict'
const { args, done, fail, deadline, quietLogger } = require('./common')
const Kafka = require('franz-kafka')

const a = args()
const want = +a.count
const linger = +(a['linger-ms'] || 300)
const messages = []
deadline(+(a['timeout-ms'] || 20000), () => ({ messages }))

const kafka = new Kafka({
  brokers: [{ id: 0, host: '127.0.0.1', port: +a.port }],
  minFetchDelay: 5,
  maxFetchDelay: 100,
  maxFetchSize: +(a['max-fetch-size'] || 300 * 1024),
  logger: quietLogger(),
})

kafka.connect(function () {
  const topic = kafka.topic(a.topic, {
    partitions: { consume: (a.from || '0-0:0').split(','), produce: [] },
  })
  let finishing = false
  topic.on('error', (err) => fail('franz-kafka topic error: ' + (err && (err.message || err.name))))
  topic.on('data', function (data) {
    messages.push(Buffer.from(data).toString('base64'))
    if (messages.length >= want && !finishing) {
      finishing = true
      setTimeout(() => done({ messages }), linger)
    }
  })
  if (want === 0) {
    finishing = true
    setTimeout(() => done({ messages }), linger)
  }
  topic.resume()
})
