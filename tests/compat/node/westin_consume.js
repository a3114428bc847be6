// kafka 0.2.3 (npm "kafka") consumer: polls FETCH from an offset, parses magic 0 messages.
//   args:   --port P --topic T --count N [--partition N] [--offset O] [--linger-ms MS]
//           [--max-errors N  (stop after N error responses; the client itself retries forever)]
//   stdout: {"messages": [string, ...], "offsets": [offset after each message, ...],
//            "errors": [[code, name], ...]}
'use strict'
const { args, done, deadline } = require('./common')
const kafka = require('kafka')

const a = args()
const want = +a.count
const linger = +(a['linger-ms'] || 300)
const messages = []
const offsets = []
const errors = []
deadline(+(a['timeout-ms'] || 20000), () => ({ messages, offsets, errors }))

const consumer = new kafka.Consumer({ host: '127.0.0.1', port: +a.port, pollInterval: 50 })
let finishing = false
consumer.on('message', function (topic, message, offset) {
  messages.push(message)
  offsets.push(offset)
  if (messages.length >= want && !finishing) {
    finishing = true
    setTimeout(() => done({ messages, offsets, errors }), linger)
  }
})
const maxErrors = +(a['max-errors'] || 0)
consumer.on('error', function (code, name) {
  errors.push([code, name === undefined ? null : String(name)])
  if (maxErrors && errors.length >= maxErrors) done({ messages, offsets, errors })
})
consumer.connect(function () {
  consumer.subscribeTopic({ name: a.topic, partition: +(a.partition || 0), offset: +(a.offset || 0) })
})
