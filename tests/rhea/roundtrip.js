// rhea as a third-party client of the router (tests/test_interop_rhea.py):
//   node roundtrip.js HOST PORT ADDRESS COUNT
// One connection with a receiver (asking for the JMS selector color = 'red') and a sender on
// ADDRESS; sends COUNT messages, red and blue by turns, receives and accepts what comes, and
// prints one JSON line: the bodies received, the outcomes the sender learned, the source the
// router answered with, and the router's offered capabilities. Exits 2 on a time-out, 3 on a
// connection error.
"use strict";
const rhea = require("rhea");

const [host, port, address, countText] = process.argv.slice(2);
const count = Number(countText);
const result = { received: [], accepted: 0, other_outcomes: [], remote_source: null, offered: null };
const container = rhea.create_container({ id: "rhea-interop" });
let sent = 0;

const timer = setTimeout(() => {
  console.log(JSON.stringify({ timeout: true, ...result }));
  process.exit(2);
}, 10000);

function finish(connection) {
  if (result.received.length === count / 2 && result.accepted + result.other_outcomes.length === count) {
    connection.close();
  }
}

container.on("connection_open", (context) => {
  result.offered = context.connection.remote.open.offered_capabilities || null;
});
container.on("receiver_open", (context) => {
  const source = context.receiver.remote.attach.source;
  result.remote_source = { address: source.address, filter: source.filter ? JSON.stringify(source.filter) : null };
});
container.on("sendable", (context) => {
  while (context.sender.sendable() && sent < count) {
    context.sender.send({ body: `m${sent}`, application_properties: { color: sent % 2 === 0 ? "red" : "blue" } });
    sent += 1;
  }
});
container.on("message", (context) => {
  result.received.push(context.message.body); // rhea accepts it (autoaccept)
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

const connection = container.connect({ host, port: Number(port), reconnect: false });
connection.open_receiver({ source: { address, filter: rhea.filter.selector("color = 'red'") } });
connection.open_sender(address);
