// rhea over its WebSocket transport (the ws package) as a third-party client of the router
// (tests/test_websocket_rhea.py):
//   node ws_roundtrip.js URL ADDRESS COUNT [--ca CA_FILE] [--browser]
// URL is ws://host:port/path or wss://... (CA_FILE: the certificate authority to trust).
// --browser: the WHATWG WebSocket of browsers (Node's own, `node --experimental-websocket`;
// rhea then takes the path it takes in a browser) instead of the ws package. One
// connection with a receiver and a sender on ADDRESS; sends COUNT messages (the last one of
// 200 000 bytes, so that it spans many AMQP frames), receives and accepts them, and prints one
// JSON line: the bodies received (long ones as their length), the outcomes the sender learned,
// and the subprotocol the router chose. Exits 2 on a time-out, 3 on a connection error.
"use strict";
const fs = require("fs");
const rhea = require("rhea");

const [url, address, countText, ...flags] = process.argv.slice(2);
const caFile = flags.includes("--ca") ? flags[flags.indexOf("--ca") + 1] : null;
const browser = flags.includes("--browser");
const WebSocket = browser ? globalThis.WebSocket : require("ws");
const count = Number(countText);
const big = "b".repeat(200000);
const result = { received: [], accepted: 0, other_outcomes: [], protocol: null };
const container = rhea.create_container({ id: "rhea-ws-interop" });
let sent = 0;

const timer = setTimeout(() => {
  console.log(JSON.stringify({ timeout: true, ...result }));
  process.exit(2);
}, 10000);

function finish(connection) {
  if (result.received.length === count && result.accepted + result.other_outcomes.length === count) {
    connection.close();
  }
}

container.on("connection_open", () => {
  result.protocol = socket.protocol;
});
container.on("sendable", (context) => {
  while (context.sender.sendable() && sent < count) {
    context.sender.send({ body: sent === count - 1 ? big : `m${sent}` });
    sent += 1;
  }
});
container.on("message", (context) => {
  const body = context.message.body;
  result.received.push(body.length > 100 ? body.length : body); // rhea accepts it (autoaccept)
  finish(context.connection);
});
container.on("accepted", (context) => {
  result.accepted += 1;
  finish(context.connection);
});
for (const outcome of ["rejected", "released", "modified"]) {
  container.on(outcome, (context) => {
    result.other_outcomes.push(outcome);
    finish(context.connection);
  });
}
container.on("connection_close", () => {
  clearTimeout(timer);
  console.log(JSON.stringify(result));
});
container.on("disconnected", (context) => {
  if (context.error) {
    clearTimeout(timer);
    console.log(JSON.stringify({ error: String(context.error), ...result }));
    process.exit(3);
  }
});

// rhea's websocket_connect takes a WebSocket class; we keep the instance to read its protocol.
let socket = null;
class RecordedWebSocket extends WebSocket {
  constructor(...args) {
    super(...args);
    socket = this;
  }
}
const options = caFile ? { ca: fs.readFileSync(caFile) } : {}; // a browser's WebSocket takes none
const ws = container.websocket_connect(RecordedWebSocket);
const connection = container.connect({ connection_details: ws(url, ["amqp"], options), reconnect: false });
connection.open_receiver(address);
connection.open_sender(address);
