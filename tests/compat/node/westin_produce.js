// kafka 0.2.3 (Marcus Westin / Tagged, npm "kafka") producer: one PRODUCE request, magic 0.
//   stdin:  {"payloads": [string, ...]}   (ASCII: the client packs strings byte per char)
//   args:   --port P --topic T [--partition N]
//   stdout: {"written": count}
'use strict'
const { args, readStdinJson, done, fail, deadline } = require('./common')
const kafka = require('kafka')

const a = args()
const payloads = readStdinJson().payloads || []
deadline(+(a['timeout-ms'] || 20000), () => ({}))

const producer = new kafka.Producer({
  host: '127.0.0.1', port: +a.port, topic: a.topic, partition: +(a.partition || 0),
})
producer.on('error', (err) => fail('kafka producer error: ' + err))
producer.connect(function () {
  const socket = producer._connection
  producer.send(payloads)
  socket.on('close', () => done({ written: payloads.length }))
  producer.close() // ends the socket after the request has been written
})
