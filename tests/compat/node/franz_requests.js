// franz-kafka 0.7.5's request client (franz-kafka/client): OFFSETS and FETCH one at a time.
//   stdin:  {"requests": [
//             {"op": "offsets", "topic": T, "partition": P, "time": -1|-2|ms, "max": N},
//             {"op": "fetch", "topic": T, "partition": P, "offset": O, "maxSize": S}, ...]}
//   args:   --port P
//   stdout: {"results": [
//             {"error": null|"OffsetOutOfRange"|..., "offsets": [...]},
//             {"error": ..., "bytesParsed": n, "messages": [{"magic", "compression",
//               "checksum", "payload": base64}]}, ...]}
// The Client is the module franz-kafka's own Broker objects use for every request.
'use strict'
const { args, readStdinJson, done, fail, deadline, quietLogger } = require('./common')
const Client = require('franz-kafka/client')(quietLogger())

const a = args()
const requests = readStdinJson().requests || []
const results = []
deadline(+(a['timeout-ms'] || 20000), () => ({ results }))

const client = new Client(0, { host: '127.0.0.1', port: +a.port })
client.on('connect', next)

function topicOf(r) {
  return { name: r.topic, maxFetchSize: r.maxSize || 1024 * 1024, compression: 0, maxMessageSize: 1000000 }
}

function next() {
  const r = requests[results.length]
  if (!r) {
    client.connection.once('close', () => done({ results }))
    return client.end()
  }
  if (r.op === 'offsets') {
    client.offsets(topicOf(r), { id: r.partition }, r.time, r.max, function (err, length, offsets) {
      results.push({ error: err ? err.message : null, offsets: err ? null : offsets })
      next()
    })
  } else if (r.op === 'fetch') {
    client.fetch(topicOf(r), { id: r.partition, offset: r.offset }, function (err, length, messages) {
      results.push({
        error: err ? err.message : null,
        bytesParsed: length === undefined ? null : length,
        messages: (messages || []).map((m) => ({
          magic: m.magic,
          compression: m.compression,
          checksum: m.checksum,
          payload: m.payload.toString('base64'),
        })),
      })
      next()
    })
  } else {
    fail('unknown op ' + r.op)
  }
}
