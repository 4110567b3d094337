#!/usr/bin/env node
// node-timer: an airlock capability adapter in plain Node.js, with no npm packages.
//
// It projects one capability, "kitchen_timer", a countdown timer whose state lives in this
// process. Observe returns {"running", "remainingSeconds"}; the actions are
// start {seconds: number, 1 to 86400} and cancel {}.
//
// Usage: node timer.js
'use strict';

const readline = require('node:readline');

const CAPABILITY = 'kitchen_timer';
const DESCRIPTOR = {
  capabilityId: CAPABILITY,
  title: 'Kitchen timer',
  version: '1',
  observe: true,
  actions: [
    {
      name: 'start',
      title: 'Start the countdown',
      input: { type: 'object', properties: { seconds: 'number' }, required: ['seconds'] },
    },
    { name: 'cancel', title: 'Cancel the countdown', input: { type: 'object', properties: {} } },
  ],
};

const MAX_FRAME = 65536; // one line, LF included
const MAX_SECONDS = 86400;

// The countdown ends at endsAt, in milliseconds of a monotonic clock; null when not running.
let endsAt = null;

const now = () => performance.now();

function state() {
  const left = endsAt === null ? 0 : endsAt - now();
  if (left <= 0) {
    endsAt = null;
    return { running: false, remainingSeconds: 0 };
  }
  return { running: true, remainingSeconds: Math.ceil(left / 1000) };
}

class Refused extends Error {}

function isObject(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// handle returns the result of one request, or throws Refused with an error code.
function handle(req) {
  if (req.protocolVersion !== 1) throw new Refused('invalid_request');
  if (req.method === 'list') return [DESCRIPTOR];
  if (!['describe', 'observe', 'invoke'].includes(req.method)) throw new Refused('unsupported_method');
  if (req.capabilityId !== CAPABILITY) throw new Refused('unknown_capability');
  if (req.method === 'describe') return DESCRIPTOR;
  if (req.method === 'observe') return state();
  // airlock checked the args against the descriptor; ranges are ours to check.
  const args = req.args;
  if (!isObject(args)) throw new Refused('invalid_args');
  const keys = Object.keys(args);
  switch (req.action) {
    case 'start': {
      const s = args.seconds;
      if (keys.length !== 1 || typeof s !== 'number' || !Number.isFinite(s) || s <= 0 || s > MAX_SECONDS) {
        throw new Refused('invalid_args');
      }
      endsAt = now() + s * 1000;
      return state();
    }
    case 'cancel':
      if (keys.length !== 0) throw new Refused('invalid_args');
      endsAt = null;
      return state();
    default:
      throw new Refused('unsupported_action');
  }
}

function log(...parts) {
  process.stderr.write(['node-timer:', ...parts].join(' ') + '\n');
}

function answer(id, result, code) {
  const resp = { protocolVersion: 1, id };
  if (code !== undefined) resp.error = { code };
  else resp.result = result;
  // Writes to a pipe are synchronous on Linux, so the answer leaves at once.
  process.stdout.write(JSON.stringify(resp) + '\n');
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', (line) => {
  if (Buffer.byteLength(line) + 1 > MAX_FRAME) {
    log('oversized request');
    process.exit(2);
  }
  let req;
  try {
    req = JSON.parse(line);
  } catch {
    req = null;
  }
  if (!isObject(req) || typeof req.id !== 'string') {
    log('malformed request'); // no id to answer to
    process.exit(2);
  }
  try {
    answer(req.id, handle(req));
  } catch (e) {
    if (e instanceof Refused) {
      answer(req.id, undefined, e.message);
    } else {
      log('internal error:', e && e.name);
      answer(req.id, undefined, 'internal');
    }
  }
});
// stdin closed: airlock is stopping us.
lines.on('close', () => process.exit(0));
