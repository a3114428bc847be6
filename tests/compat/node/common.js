// Helpers shared by the driver scripts: argument parsing, stdin JSON, one JSON result line.
// The scripts drive the third-party clients through their own APIs only; nothing here
// changes the clients' code or their bytes on the wire.
'use strict'

function args() {
  const out = {}
  const argv = process.argv.slice(2)
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith('--') || i + 1 >= argv.length) {
      fail('bad arguments: ' + argv.join(' '))
    }
    out[argv[i].slice(2)] = argv[i + 1]
  }
  return out
}

function readStdinJson() {
  const text = require('fs').readFileSync(0, 'utf8')
  return text.trim() ? JSON.parse(text) : {}
}

function done(result) {
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0))
}

function fail(message, code) {
  process.stderr.write(String(message && message.stack ? message.stack : message) + '\n')
  process.exit(code || 2)
}

// Exit 3 with what was gathered so far if the scenario does not finish in time.
function deadline(ms, partial) {
  const timer = setTimeout(() => {
    process.stdout.write(JSON.stringify(Object.assign({ timeout: true }, partial())) + '\n',
      () => process.exit(3))
  }, ms)
  return timer
}

function quietLogger() {
  const noop = function () {}
  const logger = {}
  Object.keys(console).forEach((k) => { logger[k] = noop })
  if (process.env.COMPAT_DEBUG) return console
  return logger
}

module.exports = { args, readStdinJson, done, fail, deadline, quietLogger }
