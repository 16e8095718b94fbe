// amqp10 (Node.js) as a third-party client of the router (tests/test_interop_amqp10.py):
//   node scenario.js HOST PORT SCENARIO ADDRESS
// Runs one scenario and prints one JSON line with what the client saw. Exits 2 on a time-out.
// Every scenario uses amqp10's default policy (no reconnection), one client per role.
"use strict";
const amqp10 = require("amqp10");
const { Client, Policy } = amqp10;

const [host, port, scenario, address] = process.argv.slice(2);
const uri = `amqp://${host}:${port}`;
const policy = Policy.merge({ reconnect: null }, Policy.Default);
const result = {};
const clients = [];
const timer = setTimeout(() => {
  console.log(JSON.stringify({ timeout: true, ...result }));
  process.exit(2);
}, 10000);

async function client() {
  const c = new Client(policy);
  clients.push(c);
  await c.connect(uri);
  return c;
}

const DeliveryState = require("amqp10/lib/types/delivery_state");

function outcomeName(state) {
  for (const name of ["Accepted", "Rejected", "Released", "Modified", "Received"]) {
    if (state instanceof DeliveryState[name]) return name.toLowerCase();
  }
  return state === undefined || state === null ? null : "unknown";
}

async function send(sender, message) {
  try {
    return { outcome: outcomeName(await sender.send(message)) };
  } catch (err) {
    // amqp10 fails the send of a rejected message with the rejected's error
    return { error: err && (err.condition ? { condition: String(err.condition), description: err.description } : String(err.message || err)) };
  }
}

function collect(receiver, count, settle) {
  const got = [];
  return new Promise((resolve) => {
    receiver.on("message", (m) => {
      got.push(m);
      if (settle) settle(receiver, m, got.length - 1);
      if (got.length === count) resolve(got);
    });
  });
}

function plain(m) {
  return {
    body: Buffer.isBuffer(m.body) ? { binary: m.body.length } : m.body,
    properties: m.properties,
    applicationProperties: m.applicationProperties,
    messageAnnotations: m.messageAnnotations,
    header: m.header,
  };
}

const scenarios = {
  // A receiver first, then a sender: messages with properties, application properties and
  // annotations, each accepted.
  async roundtrip() {
    const rc = await client();
    const receiver = await rc.createReceiver(address);
    result.receiver_name = receiver.name;
    const got = collect(receiver, 5, (r, m) => r.accept(m));
    const sc = await client();
    const sender = await sc.createSender(address);
    result.sender_name = sender.name;
    result.sends = [];
    for (let i = 0; i < 5; i++) {
      result.sends.push(await send(sender, {
        body: { n: i, text: `message ${i}` },
        header: { durable: true, priority: 6 },
        properties: { messageId: `m${i}`, subject: "subj", replyTo: "replies", correlationId: `c${i}`, contentType: "application/json" },
        applicationProperties: { i, flag: true, name: "nom" },
        messageAnnotations: { "x-opt-amqp10": i },
      }));
    }
    result.received = (await got).map(plain);
  },
  // A sender first (no credit while no consumer), then a receiver: what was sent meanwhile waits
  // in the client (it keeps the credit rules) and goes once the receiver is there.
  async sender_first() {
    const sc = await client();
    const sender = await sc.createSender(address);
    const pending = [0, 1, 2].map((i) => send(sender, { body: `early ${i}` }));
    result.credit_before = sender.linkCredit;
    const rc = await client();
    const receiver = await rc.createReceiver(address);
    const got = collect(receiver, 3, (r, m) => r.accept(m));
    result.sends = await Promise.all(pending);
    result.received = (await got).map((m) => m.body);
  },
  // The receiver settles with each outcome in turn. (amqp10's default receiver accepts every
  // message as it arrives; its "settleOnDisposition" mode asks for rcv-settle-mode second, but its
  // dispositions still go out settled.)
  async outcomes() {
    const rc = await client();
    const receiver = await rc.createReceiver(address, { attach: { rcvSettleMode: 1 } });
    result.receiver_rcv_settle_mode = receiver.remote.attach.rcvSettleMode;
    const got = collect(receiver, 4, (r, m, i) => {
      if (i === 0) r.accept(m);
      else if (i === 1) r.reject(m, { condition: "amqp:invalid-field", description: "no good" });
      else if (i === 2) r.release(m);
      else r.modify(m, { deliveryFailed: true, undeliverableHere: true });
    });
    const sc = await client();
    const sender = await sc.createSender(address);
    const sends = [0, 1, 2, 3].map((i) => sender.send({ body: `o${i}` }).then(
      (state) => ({ outcome: outcomeName(state), state: state && JSON.parse(JSON.stringify(state)) }),
      (err) => ({ error: String(err && (err.condition || err.message || err)), description: err && err.description })));
    result.sends = await Promise.all(sends);
    await got;
  },
  // 1 MiB in many frames both ways; the receiver allows messages that large.
  async large() {
    const rc = await client();
    const receiver = await rc.createReceiver(address, { attach: { maxMessageSize: 4 * 1024 * 1024 } });
    const got = collect(receiver, 1, (r, m) => r.accept(m));
    const sc = await client();
    const sender = await sc.createSender(address);
    const body = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < body.length; i++) body[i] = i % 251;
    result.sends = [await send(sender, { body })];
    const [m] = await got;
    result.same = Buffer.isBuffer(m.body) && m.body.equals(body);
    result.length = m.body.length;
  },
  // A receiver whose max-message-size (amqp10's default: 10000 bytes) a message is larger than.
  async too_large() {
    const rc = await client();
    const receiver = await rc.createReceiver(address);
    result.receiver_max_message_size = receiver.policy.attach.maxMessageSize;
    const got = [];
    receiver.on("message", (m) => { got.push(m); receiver.accept(m); });
    receiver.on("errorReceived", (e) => { result.receiver_error = String(e && (e.condition || e)); });
    const sc = await client();
    const sender = await sc.createSender(address);
    result.sends = [await send(sender, { body: Buffer.alloc(20000, 7) }), await send(sender, { body: "small" })];
    result.received = got.map((m) => (Buffer.isBuffer(m.body) ? m.body.length : m.body));
  },
  // A receiver granting one message of credit at a time (manual credit, a flow after each).
  async credit_one() {
    const rc = await client();
    const receiver = await rc.createReceiver(address, { credit: (link) => { if (link.linkCredit <= 0) link.addCredits(1); }, creditQuantum: 1 });
    const got = collect(receiver, 20, (r, m) => r.accept(m));
    const sc = await client();
    const sender = await sc.createSender(address);
    result.sends = await Promise.all(Array.from({ length: 20 }, (_, i) => send(sender, { body: i + 1 })));
    result.received = (await got).map((m) => m.body);
  },
  // A receiver that grants no credit and a sender with more to send than the window the
  // router gives it (run against a listener with link capacity 10): amqp10's attach says
  // initial-delivery-count 1 while it counts its own deliveries from 0, so it reckons one
  // credit more than the router granted.
  async window() {
    const rc = await client();
    const receiver = await rc.createReceiver(address, { credit: () => {}, attach: { rcvSettleMode: 0 } });
    result.receiver = receiver.name;
    const sc = await client();
    const sender = await sc.createSender(address);
    result.initial_delivery_count = sender.policy.attach.initialDeliveryCount;
    const detached = new Promise((resolve) => sender.on("detached", (info) => resolve(info)));
    const sends = Array.from({ length: 12 }, (_, i) => send(sender, { body: i + 1 }));
    const info = await detached;
    result.detach_error = info && info.error ? String(info.error.condition) : null;
    result.sends = await Promise.all(sends);
  },
};

(async () => {
  try {
    await scenarios[scenario]();
  } catch (err) {
    result.error = String((err && (err.stack || err.message)) || err);
  }
  for (const c of clients) {
    try { await c.disconnect(); } catch (err) { /* already gone */ }
  }
  clearTimeout(timer);
  console.log(JSON.stringify(result));
})();
