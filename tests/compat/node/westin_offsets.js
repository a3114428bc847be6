// kafka 0.2.3 (npm "kafka") Client.fetchOffsets: one OFFSETS request.
// The client always sends its own idea of a time (see README: it packs seconds into the
// int64 oddly, which ends up as a time far in the future), so the broker's answer follows
// the "explicit time" branch of 0.7's getOffsetsBefore, not -1/-2.
//   args:   --port P --topic T --max N [--partition N]
//   stdout: {"offsets": [...]}
'use strict'
const { args, done, fail, deadline } = require('./common')
const kafka = require('kafka')

const a = args()
const offsets = []
deadline(+(a['timeout-ms'] || 20000), () => ({ offsets }))

const client = new kafka.Client({ host: '127.0.0.1', port: +a.port })
client.on('error', (code, name) => fail('kafka client error ' + code + ' ' + name))
client.on('offset', (topic, offset) => offsets.push(offset))
client.on('lastoffset', () => { client.close(); done({ offsets }) })
client.connect(function () {
  client.fetchOffsets({ name: a.topic, partition: +(a.partition || 0), offsets: +a.max })
})
