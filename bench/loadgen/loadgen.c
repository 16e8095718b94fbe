/*
 * loadgen: an AMQP 1.0 load generator on the Proton-C proactor API.
 *
 * One binary, six modes (see README.md): send, receive, listen, pingpong, echo, pairs.
 * Every mode prints exactly one line of JSON on stdout when it finishes (or times out).
 *
 * Message layout (what send and pingpong produce):
 *   [properties section: to, reply-to]   only for pingpong requests
 *   data section: S bytes; bytes 0..7 = send time, CLOCK_MONOTONIC ns, host byte order
 * Received messages are scanned (not decoded): any sections may precede the body
 * (a router may add annotations); the first data section carries the timestamp.
 *
 * The hot paths allocate nothing per message: messages are written from a
 * preallocated template, received bytes land in one reusable buffer, latencies
 * go into an array sized up front, sends are batched at the end of each
 * proactor batch and credit is replenished in batches of half the window.
 */
#define _POSIX_C_SOURCE 200809L

#include <proton/condition.h>
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/listener.h>
#include <proton/netaddr.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/ssl.h>
#include <proton/terminus.h>
#include <proton/transport.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum mode { SEND, RECEIVE, LISTEN, PINGPONG, ECHO, PAIRS };
static const char *const MODE_NAMES[] = {"send", "receive", "listen", "pingpong", "echo", "pairs"};
#define N_MODES 6

#define MAX_CONNS 64
#define GRACE_MS 2000 /* after finishing: how long peers get to close their connections */

typedef struct {
  /* options */
  enum mode mode;
  const char *host, *port, *address, *reply_address;
  const char *ssl_ca; /* client modes: direct TLS, trusting this PEM CA file */
  long count; /* 0 = unbounded (listen, echo) */
  long size, window, credit;
  double timeout_s;
  int presettled, echo;

  pn_proactor_t *proactor;
  pn_listener_t *listener;
  pn_connection_t *conns[MAX_CONNS];
  int nconns;
  pn_link_t *sender, *receiver; /* client modes */

  /* outgoing message template and incoming scratch buffer */
  char *msg;
  size_t msg_len, ts_off;
  char *buf;
  size_t buf_cap;

  /* send side */
  long sent, settled, inflight, outcomes[5]; /* accepted, rejected, released, modified, other */
  uint64_t tags;                             /* delivery tags, unique per process */
  int all_sent;
  /* receive side */
  long received, echoed, reply_links;
  uint64_t body_bytes;
  int64_t t_start, t_last, t_end, t_request; /* first send or arrival, last arrival, ... */
  int64_t *lat;
  long nlat, lat_cap;
  int waiting_reply, reply_ready;

  int want_pump, done;
} app_t;

static app_t app;
static volatile sig_atomic_t got_signal;

/* pairs mode: N producer connections and N consumer connections, pair i on PREFIXi */
typedef struct {
  pn_connection_t *conn;
  pn_link_t *link;
  long index;
  int sender, woken;
  int64_t next_send; /* sender: when its next message is due */
} pair_end_t;

static struct {
  long n;
  double rate, seconds, warmup;
  pair_end_t *ends; /* consumers [0, n), producers [n, 2n) */
  long linked, closed;
  int started;
  int64_t period, first, last, deadline; /* measured window [first, last): sends stop at last */
  long sent, sent_in_window, received, received_in_window;
} pr;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *what, const char *detail) {
  fprintf(stderr, "loadgen %s: %s%s%s\n", MODE_NAMES[app.mode], what, detail ? ": " : "",
          detail ? detail : "");
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  if (!p) die("out of memory", NULL);
  return p;
}

/* ---- AMQP encoding: just enough to write and scan our messages ------------------------------ */

static void put_be32(char *p, uint32_t v) {
  p[0] = (char)(v >> 24); p[1] = (char)(v >> 16); p[2] = (char)(v >> 8); p[3] = (char)v;
}
static uint32_t get_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Append a str32-encoded string; return the new write position. */
static char *put_str(char *p, const char *s) {
  size_t n = strlen(s);
  *p++ = (char)0xb1;
  put_be32(p, (uint32_t)n);
  memcpy(p + 4, s, n);
  return p + 4 + n;
}

/* Build the message template: optional properties (to, reply-to), then one data section. */
static void build_template(const char *to, const char *reply_to) {
  size_t cap = 64 + (size_t)app.size + (to ? strlen(to) : 0) + (reply_to ? strlen(reply_to) : 0);
  char *p = app.msg = xmalloc(cap);
  if (reply_to) {
    char *list;
    memcpy(p, "\x00\x53\x73\xd0", 4); /* properties: list32 */
    list = p + 4;
    p = list + 8;
    *p++ = 0x40;                      /* message-id: null */
    *p++ = 0x40;                      /* user-id: null */
    p = put_str(p, to);               /* to */
    *p++ = 0x40;                      /* subject: null */
    p = put_str(p, reply_to);         /* reply-to */
    put_be32(list, (uint32_t)(p - list - 4)); /* size: count + fields */
    put_be32(list + 4, 5);                    /* count */
  }
  memcpy(p, "\x00\x53\x75\xb0", 4); /* data section: vbin32 */
  put_be32(p + 4, (uint32_t)app.size);
  p += 8;
  app.ts_off = (size_t)(p - app.msg);
  for (long i = 0; i < app.size; i++) p[i] = (char)('a' + i % 26);
  app.msg_len = app.ts_off + (size_t)app.size;
}

/* Skip one encoded value (constructor + payload); NULL if malformed or truncated. */
static const uint8_t *skip_value(const uint8_t *p, const uint8_t *end, int depth) {
  size_t n;
  if (p >= end || depth > 8) return NULL;
  uint8_t c = *p++;
  if (c == 0x00) { /* described: descriptor, then value */
    p = skip_value(p, end, depth + 1);
    return p ? skip_value(p, end, depth + 1) : NULL;
  }
  switch (c >> 4) {
  case 0x4: n = 0; break;
  case 0x5: n = 1; break;
  case 0x6: n = 2; break;
  case 0x7: n = 4; break;
  case 0x8: n = 8; break;
  case 0x9: n = 16; break;
  case 0xa: case 0xc: case 0xe:
    if (p >= end) return NULL;
    n = 1 + (size_t)*p;
    break;
  case 0xb: case 0xd: case 0xf:
    if (end - p < 4) return NULL;
    n = 4 + (size_t)get_be32(p);
    break;
  default: return NULL;
  }
  return (size_t)(end - p) < n ? NULL : p + n;
}

/* Section code of a descriptor at p (0x53 smallulong, 0x80 ulong or symbol); 0 if unknown. */
static uint64_t descriptor_code(const uint8_t *p, const uint8_t *end) {
  if (end - p >= 2 && p[0] == 0x53) return p[1];
  if (end - p >= 9 && p[0] == 0x80) return (uint64_t)get_be32(p + 1) << 32 | get_be32(p + 5);
  if (end - p >= 2 && p[0] == 0xa3) {
    size_t n = p[1];
    if ((size_t)(end - p - 2) < n) return 0;
    if (n == 16 && !memcmp(p + 2, "amqp:data:binary", 16)) return 0x75;
    if (n == 20 && !memcmp(p + 2, "amqp:properties:list", 20)) return 0x73;
  }
  return 0;
}

typedef struct {
  const uint8_t *body;     /* first data section */
  size_t body_len;         /* total bytes of all data sections */
  const uint8_t *reply_to; /* properties.reply-to, or NULL */
  size_t reply_len;
} scan_t;

/* reply-to is field 4 of the properties list */
static void scan_properties(const uint8_t *p, const uint8_t *end, scan_t *s) {
  uint32_t count;
  if (p >= end) return;
  if (*p == 0xc0 && end - p >= 3) { count = p[2]; p += 3; }
  else if (*p == 0xd0 && end - p >= 9) { count = get_be32(p + 5); p += 9; }
  else return;
  for (uint32_t i = 0; i < count && i < 4 && p; i++) p = skip_value(p, end, 0);
  if (!p || count < 5 || p >= end || !skip_value(p, end, 0)) return;
  if (*p == 0xa1 || *p == 0xa3) { /* str8 / sym8 */
    s->reply_to = p + 2;
    s->reply_len = p[1];
  } else if (*p == 0xb1 || *p == 0xb3) { /* str32 / sym32 */
    s->reply_to = p + 5;
    s->reply_len = get_be32(p + 1);
  }
}

static void scan_message(const uint8_t *p, size_t len, scan_t *s) {
  const uint8_t *end = p + len;
  memset(s, 0, sizeof *s);
  while (p < end && *p == 0x00) {
    uint64_t code = descriptor_code(p + 1, end);
    const uint8_t *value = skip_value(p + 1, end, 0);
    const uint8_t *next = value ? skip_value(value, end, 0) : NULL;
    if (!next) return;
    if (code == 0x73) scan_properties(value, next, s);
    if (code == 0x75 && (*value == 0xa0 || *value == 0xb0)) {
      size_t hdr = *value == 0xa0 ? 2 : 5;
      if (!s->body) s->body = value + hdr;
      s->body_len += (size_t)(next - value) - hdr;
    }
    p = next;
  }
}

/* ---- results -------------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return (x > y) - (x < y);
}

static double pct_us(double q) { /* nearest rank on the sorted array */
  if (app.nlat == 0) return 0.0;
  long i = (long)(q * (double)app.nlat + 0.999999) - 1;
  if (i < 0) i = 0;
  if (i >= app.nlat) i = app.nlat - 1;
  return (double)app.lat[i] / 1e3;
}

static void record_latency(int64_t ns) {
  if (app.nlat == app.lat_cap) { /* only listen without --count grows (doubling) */
    app.lat_cap = app.lat_cap ? app.lat_cap * 2 : 65536;
    app.lat = realloc(app.lat, (size_t)app.lat_cap * sizeof *app.lat);
    if (!app.lat) die("out of memory", NULL);
  }
  app.lat[app.nlat++] = ns;
}

static void print_result(int timed_out) {
  double secs = (double)(app.t_end - app.t_start) / 1e9;
  double rate = secs > 0 ? 1.0 / secs : 0.0;
  printf("{\"role\":\"%s\"", MODE_NAMES[app.mode]);
  if (app.mode == SEND) {
    long n = app.presettled ? app.sent : app.settled;
    printf(",\"count\":%ld,\"sent\":%ld,\"size\":%ld,\"presettled\":%s,\"seconds\":%.6f"
           ",\"msgs_per_s\":%.1f,\"mib_per_s\":%.3f,\"accepted\":%ld,\"rejected\":%ld"
           ",\"released\":%ld,\"modified\":%ld,\"other\":%ld",
           n, app.sent, app.size, app.presettled ? "true" : "false", secs, (double)n * rate,
           (double)n * (double)app.size * rate / 1048576.0, app.outcomes[0], app.outcomes[1],
           app.outcomes[2], app.outcomes[3], app.outcomes[4]);
  } else if (app.mode == ECHO || (app.mode == LISTEN && app.echo)) {
    printf(",\"echo\":true,\"count\":%ld", app.echoed);
  } else {
    qsort(app.lat, (size_t)app.nlat, sizeof *app.lat, cmp_i64);
    if (app.mode == PINGPONG)
      printf(",\"count\":%ld,\"size\":%ld,\"seconds\":%.6f,\"round_trips_per_s\":%.1f",
             app.received, app.size, secs, (double)app.received * rate);
    else
      printf(",\"count\":%ld,\"seconds\":%.6f,\"msgs_per_s\":%.1f,\"mib_per_s\":%.3f", app.received,
             secs, (double)app.received * rate, (double)app.body_bytes * rate / 1048576.0);
    printf(",\"samples\":%ld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f",
           app.nlat, pct_us(0.5), pct_us(0.99), pct_us(0.999), pct_us(1.0));
  }
  printf(",\"timeout\":%s}\n", timed_out ? "true" : "false");
  fflush(stdout);
}

/* Print the result and wind down; the main loop exits once every connection has closed.
   Clients close their connection now. listen stops accepting and lets its clients close
   theirs (they may still be reading the last outcomes or replies); the grace timer ends
   the process if they do not. */
static void finish(void) {
  if (app.done) return;
  app.done = 1;
  if (!app.t_end) app.t_end = app.t_last;
  print_result(0);
  if (app.mode != LISTEN)
    for (int i = 0; i < app.nconns; i++) pn_connection_wake(app.conns[i]); /* closed on WAKE */
  if (app.listener) pn_listener_close(app.listener);
  pn_proactor_set_timeout(app.proactor, GRACE_MS);
}

/* ---- links ---------------------------------------------------------------------------------- */

/* Top up credit to min(window, still wanted), once it has fallen to half the window. */
static void top_up(pn_link_t *l, long window, long wanted) {
  long target = wanted < window ? wanted : window;
  long credit = pn_link_credit(l);
  if (app.mode == ECHO) { /* do not take requests faster than replies can leave */
    pn_connection_t *c = pn_session_connection(pn_link_session(l));
    for (pn_link_t *s = pn_link_head(c, 0); s; s = pn_link_next(s, 0))
      if (pn_link_is_sender(s)) credit += pn_link_queued(s);
  }
  if (target - credit > 0 && (credit <= window / 2 || target < window))
    pn_link_flow(l, (int)(target - credit));
}

static long wanted(long done_count) { return app.count ? app.count - done_count : 1L << 30; }

static void send_one(pn_link_t *l, const char *bytes, size_t len, int settle) {
  uint64_t tag = app.tags++;
  pn_delivery_t *d = pn_delivery(l, pn_dtag((const char *)&tag, sizeof tag));
  pn_link_send(l, bytes, len);
  pn_link_advance(l);
  if (settle) pn_delivery_settle(d);
}

static void stamp(int64_t t) { memcpy(app.msg + app.ts_off, &t, sizeof t); }

/* send mode: fill the credit and the window; called once per proactor batch */
static void pump(void) {
  pn_link_t *l = app.sender;
  while (app.sent < app.count && pn_link_credit(l) > 0 &&
         (app.presettled || app.inflight < app.window)) {
    int64_t t = now_ns();
    if (!app.t_start) app.t_start = t;
    stamp(t);
    send_one(l, app.msg, app.msg_len, app.presettled);
    app.sent++;
    if (!app.presettled) app.inflight++;
  }
  if (app.presettled && app.sent == app.count && !app.all_sent) {
    app.all_sent = 1; /* done when the peer answers our close: it has read everything */
    pn_connection_close(pn_session_connection(pn_link_session(l)));
  }
}

static void send_request(void) {
  app.t_request = now_ns();
  if (!app.t_start) app.t_start = app.t_request;
  stamp(app.t_request);
  send_one(app.sender, app.msg, app.msg_len, 0);
  app.sent++;
  app.waiting_reply = 1;
}

static void pingpong_maybe_send(void) {
  if (app.reply_ready && !app.waiting_reply && app.sent < app.count &&
      pn_link_credit(app.sender) > 0)
    send_request();
}

/* An outcome (or settlement) arrived for something we sent. */
static void on_outcome(pn_link_t *l, pn_delivery_t *d) {
  uint64_t st = pn_delivery_remote_state(d);
  int terminal = st >= PN_ACCEPTED && st <= PN_MODIFIED;
  if (!terminal && !pn_delivery_settled(d)) return; /* e.g. received-state: not final */
  if (app.mode == SEND && l == app.sender) {
    app.outcomes[terminal ? st - PN_ACCEPTED : 4]++;
    app.inflight--;
    if (++app.settled == app.count) {
      app.t_end = now_ns();
      finish();
    }
    app.want_pump = 1;
  } else if (app.mode == PINGPONG && st != PN_ACCEPTED && !app.done) {
    die("request not accepted", pn_disposition_type_name(st));
  }
  pn_delivery_settle(d);
}

/* Find the link a reply to `to` leaves on: a sender whose address matches (listen: the client's
   receiver source; echo: our target), else (listen only) any sender on the connection. */
static pn_link_t *reply_link(pn_connection_t *c, const uint8_t *to, size_t len) {
  pn_link_t *any = NULL;
  for (pn_link_t *l = pn_link_head(c, PN_LOCAL_ACTIVE); l; l = pn_link_next(l, PN_LOCAL_ACTIVE)) {
    if (!pn_link_is_sender(l)) continue;
    pn_terminus_t *t = app.mode == LISTEN ? pn_link_remote_source(l) : pn_link_target(l);
    const char *a = pn_terminus_get_address(t);
    if (to && a && strlen(a) == len && !memcmp(a, to, len)) return l;
    if (!any) any = l;
  }
  if (app.mode == LISTEN) return any;
  if (!to) return NULL;
  char name[64], addr[1024]; /* echo: open a sender to this reply-to address */
  if (len >= sizeof addr) return NULL;
  memcpy(addr, to, len);
  addr[len] = 0;
  snprintf(name, sizeof name, "loadgen-reply-%ld", ++app.reply_links);
  pn_link_t *l = pn_sender(pn_link_session(app.receiver), name);
  pn_terminus_set_address(pn_link_target(l), addr);
  pn_link_open(l);
  return l;
}

/* A complete message arrived on link l. */
static void on_message(pn_link_t *l, pn_delivery_t *d, const uint8_t *bytes, size_t len) {
  int64_t t = now_ns();
  scan_t s;
  scan_message(bytes, len, &s);
  uint64_t outcome = PN_ACCEPTED;
  if (app.mode == ECHO || (app.mode == LISTEN && app.echo)) {
    pn_connection_t *c = pn_session_connection(pn_link_session(l));
    pn_link_t *out = reply_link(c, s.reply_to, s.reply_len);
    if (out) {
      send_one(out, (const char *)bytes, len, 0); /* unchanged */
      app.echoed++;
    } else {
      outcome = PN_REJECTED;
    }
  } else {
    if (!app.t_start) app.t_start = t; /* pingpong: already the first request */
    app.t_last = t;
    app.received++;
    app.body_bytes += s.body_len;
    if (app.mode == PINGPONG) {
      record_latency(t - app.t_request);
      app.waiting_reply = 0;
    } else if (s.body && s.body_len >= 8) {
      int64_t sent;
      memcpy(&sent, s.body, sizeof sent);
      record_latency(t - sent);
    }
  }
  if (!pn_delivery_settled(d)) pn_delivery_update(d, outcome);
  pn_delivery_settle(d);
  long done_count = app.mode == ECHO || app.echo ? app.echoed : app.received;
  if (app.mode == PINGPONG) {
    top_up(l, app.credit, wanted(done_count));
    if (done_count == app.count) { app.t_end = t; finish(); }
    else pingpong_maybe_send();
  } else {
    if (app.count && done_count == app.count) finish();
    else top_up(l, app.credit, wanted(done_count));
  }
}

static void on_delivery(pn_link_t *l, pn_delivery_t *d) {
  if (pn_link_is_sender(l)) { on_outcome(l, d); return; }
  if (pn_delivery_aborted(d)) { pn_delivery_settle(d); return; }
  if (!pn_delivery_readable(d) || pn_delivery_partial(d)) return; /* wait for the whole message */
  size_t n = pn_delivery_pending(d);
  if (n > app.buf_cap) {
    free(app.buf);
    app.buf_cap = n * 2;
    app.buf = xmalloc(app.buf_cap);
  }
  ssize_t got = pn_link_recv(l, app.buf, n);
  if (got < 0 && got != PN_EOS) { pn_delivery_settle(d); return; }
  if (app.done) { pn_delivery_settle(d); return; }
  on_message(l, d, (const uint8_t *)app.buf, got < 0 ? 0 : (size_t)got);
}

/* The peer attached a link to us (listen mode): mirror its termini and open it. */
static void listen_link_open(pn_link_t *l) {
  pn_terminus_copy(pn_link_source(l), pn_link_remote_source(l));
  pn_terminus_copy(pn_link_target(l), pn_link_remote_target(l));
  if (pn_link_is_sender(l) && !app.echo) {
    pn_condition_set_name(pn_link_condition(l), "amqp:not-implemented");
    pn_condition_set_description(pn_link_condition(l), "loadgen listen sends only with --echo");
    pn_link_open(l);
    pn_link_close(l);
    return;
  }
  pn_link_open(l);
  if (!pn_link_is_sender(l)) top_up(l, app.credit, wanted(app.echo ? app.echoed : app.received));
}

/* ---- events --------------------------------------------------------------------------------- */

static void check(pn_condition_t *cond, const char *what) {
  if (app.done) return;
  if (pn_condition_is_set(cond)) {
    char detail[1024];
    snprintf(detail, sizeof detail, "%s: %s", pn_condition_get_name(cond),
             pn_condition_get_description(cond) ? pn_condition_get_description(cond) : "");
    if (app.mode == LISTEN && strcmp(what, "listener") != 0) {
      fprintf(stderr, "loadgen listen: %s (ignored): %s\n", what, detail);
      return;
    }
    die(what, detail);
  }
}

static void client_init(pn_connection_t *c) {
  pn_session_t *ssn = pn_session(c);
  pn_connection_open(c);
  pn_session_open(ssn);
  if (app.mode == SEND || app.mode == PINGPONG) {
    app.sender = pn_sender(ssn, "loadgen-send");
    pn_terminus_set_address(pn_link_target(app.sender), app.address);
    if (app.presettled) pn_link_set_snd_settle_mode(app.sender, PN_SND_SETTLED);
    pn_link_open(app.sender);
  }
  if (app.mode != SEND) {
    const char *src = app.mode == PINGPONG ? app.reply_address : app.address;
    app.receiver = pn_receiver(ssn, "loadgen-receive");
    pn_terminus_set_address(pn_link_source(app.receiver), src);
    pn_link_open(app.receiver);
    top_up(app.receiver, app.credit, wanted(0));
  }
}

static void pairs_handle(pn_event_t *e);

static void handle(pn_event_t *e) {
  if (app.mode == PAIRS) { pairs_handle(e); return; }
  pn_connection_t *c = pn_event_connection(e);
  pn_link_t *l = pn_event_link(e);
  switch (pn_event_type(e)) {
  case PN_LISTENER_OPEN: {
    char host[256], port[32];
    const pn_netaddr_t *na = pn_listener_addr(pn_event_listener(e));
    pn_netaddr_host_port(na, host, sizeof host, port, sizeof port);
    fprintf(stderr, "loadgen listen: listening on %s:%s\n", host, port);
    break;
  }
  case PN_LISTENER_ACCEPT:
    pn_listener_accept2(pn_event_listener(e), NULL, NULL);
    break;
  case PN_LISTENER_CLOSE:
    check(pn_listener_condition(pn_event_listener(e)), "listener");
    app.listener = NULL;
    break;
  case PN_CONNECTION_INIT: {
    char id[64];
    snprintf(id, sizeof id, "loadgen-%s-%ld", MODE_NAMES[app.mode], (long)getpid());
    pn_connection_set_container(c, id);
    if (app.done || app.nconns == MAX_CONNS) { /* not tracked: refused */
      pn_connection_close(c);
      break;
    }
    app.conns[app.nconns++] = c;
    if (app.mode != LISTEN) client_init(c);
    break;
  }
  case PN_CONNECTION_BOUND:
    if (app.mode == LISTEN) {
      pn_transport_t *t = pn_event_transport(e);
      pn_transport_require_auth(t, false);
      pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
    }
    break;
  case PN_CONNECTION_REMOTE_OPEN:
    if (app.mode == LISTEN) pn_connection_open(c);
    break;
  case PN_SESSION_REMOTE_OPEN:
    if (app.mode == LISTEN) pn_session_open(pn_event_session(e));
    break;
  case PN_LINK_REMOTE_OPEN:
    if (app.mode == LISTEN) listen_link_open(l);
    else if (l == app.receiver && app.mode == PINGPONG) {
      app.reply_ready = 1; /* the reply source is attached: requests may go */
      pingpong_maybe_send();
    }
    break;
  case PN_LINK_FLOW:
    if (app.mode == SEND) app.want_pump = 1;
    else if (app.mode == PINGPONG) pingpong_maybe_send();
    else if (app.mode == ECHO) top_up(app.receiver, app.credit, wanted(app.echoed));
    break;
  case PN_DELIVERY:
    on_delivery(l, pn_event_delivery(e));
    break;
  case PN_CONNECTION_WAKE:
    if (app.done) pn_connection_close(c);
    break;
  case PN_LINK_REMOTE_CLOSE:
  case PN_LINK_REMOTE_DETACH:
    check(pn_link_remote_condition(l), "link closed by peer");
    if (app.mode != LISTEN && !app.done) die("link closed by peer", pn_link_name(l));
    pn_link_close(l);
    break;
  case PN_SESSION_REMOTE_CLOSE:
    check(pn_session_remote_condition(pn_event_session(e)), "session closed by peer");
    pn_session_close(pn_event_session(e));
    break;
  case PN_CONNECTION_REMOTE_CLOSE:
    check(pn_connection_remote_condition(c), "connection closed by peer");
    if (app.mode == SEND && app.all_sent && !app.done) { app.t_end = now_ns(); finish(); }
    if (app.mode != LISTEN && !app.done) die("connection closed by peer", NULL);
    pn_connection_close(c);
    break;
  case PN_TRANSPORT_CLOSED:
    check(pn_transport_condition(pn_event_transport(e)), "transport error");
    if (app.mode != LISTEN && !app.done) die("connection closed", NULL);
    for (int i = 0; i < app.nconns; i++)
      if (app.conns[i] == c) app.conns[i] = app.conns[--app.nconns];
    break;
  case PN_PROACTOR_INTERRUPT:
    if (got_signal && !app.done) {
      int server = app.mode == LISTEN || app.mode == ECHO;
      if (!app.t_end) app.t_end = app.t_last ? app.t_last : now_ns();
      print_result(0);
      exit(server ? 0 : 128 + got_signal);
    }
    break;
  case PN_PROACTOR_TIMEOUT:
    if (app.done) exit(0); /* peers did not close in time: the result is out anyway */
    if (!app.t_end) app.t_end = app.t_last ? app.t_last : now_ns();
    if (!app.t_start) app.t_start = app.t_end;
    print_result(1);
    exit(2);
  default:
    break;
  }
}

/* ---- pairs mode ----------------------------------------------------------------------------- */
/* Many independent flows at a low rate each (bench/pairs.py): one proactor thread drives 2N
   connections. A 1 ms ticker wakes every producer whose next message is due; the producer sends
   on its WAKE (its own connection's batch) with the current time in the body. Consumers accept
   every message and record send-to-arrival latency for messages sent inside the window. */

#define PAIRS_CREDIT 10
#define PAIRS_TICK_MS 1
#define PAIRS_DRAIN_NS 2000000000LL /* after the window: time for the last messages to arrive */

static void pairs_send(pair_end_t *p) {
  int64_t t = now_ns();
  while (p->next_send <= t && p->next_send < pr.last && pn_link_credit(p->link) > 0) {
    stamp(t);
    send_one(p->link, app.msg, app.msg_len, 0);
    pr.sent++;
    if (t >= pr.first && t < pr.last) pr.sent_in_window++;
    p->next_send += pr.period;
  }
}

static void pairs_finish(int timed_out) {
  if (app.done) return;
  app.done = 1;
  qsort(app.lat, (size_t)app.nlat, sizeof *app.lat, cmp_i64);
  printf("{\"role\":\"pairs\",\"pairs\":%ld,\"rate_per_pair\":%.3f,\"seconds\":%.3f,\"size\":%ld"
         ",\"sent\":%ld,\"sent_in_window\":%ld,\"received\":%ld,\"received_in_window\":%ld"
         ",\"accepted\":%ld,\"rejected\":%ld,\"released\":%ld,\"modified\":%ld,\"other\":%ld"
         ",\"samples\":%ld,\"p50_us\":%.1f,\"p99_us\":%.1f,\"p999_us\":%.1f,\"max_us\":%.1f"
         ",\"timeout\":%s}\n",
         pr.n, pr.rate, pr.seconds, app.size, pr.sent, pr.sent_in_window, pr.received,
         pr.received_in_window, app.outcomes[0], app.outcomes[1], app.outcomes[2], app.outcomes[3],
         app.outcomes[4], app.nlat, pct_us(0.5), pct_us(0.99), pct_us(0.999), pct_us(1.0),
         timed_out ? "true" : "false");
  fflush(stdout);
  for (long i = 0; i < 2 * pr.n; i++)
    if (pr.ends[i].conn) pn_connection_wake(pr.ends[i].conn); /* closed on WAKE */
  pn_proactor_set_timeout(app.proactor, GRACE_MS);
}

static void pairs_start(const char *addr) {
  pr.ends = xmalloc((size_t)(2 * pr.n) * sizeof *pr.ends);
  memset(pr.ends, 0, (size_t)(2 * pr.n) * sizeof *pr.ends);
  app.lat_cap = (long)((double)pr.n * pr.rate * pr.seconds * 1.1) + 1024;
  app.lat = xmalloc((size_t)app.lat_cap * sizeof *app.lat);
  pr.deadline = now_ns() + (int64_t)(app.timeout_s > 0 ? app.timeout_s * 1e9 : 1e18);
  for (long i = 0; i < 2 * pr.n; i++) {
    pair_end_t *p = &pr.ends[i];
    p->index = i % pr.n;
    p->sender = i >= pr.n;
    p->conn = pn_connection();
    pn_connection_set_context(p->conn, p);
    pn_proactor_connect2(app.proactor, p->conn, NULL, addr);
  }
  pn_proactor_set_timeout(app.proactor, PAIRS_TICK_MS);
}

static void pairs_init(pair_end_t *p) {
  char name[32], address[1024];
  snprintf(name, sizeof name, "loadgen-pairs-%ld", p->index);
  snprintf(address, sizeof address, "%s%ld", app.address, p->index);
  pn_connection_set_container(p->conn, name);
  pn_session_t *ssn = pn_session(p->conn);
  pn_connection_open(p->conn);
  pn_session_open(ssn);
  if (p->sender) {
    p->link = pn_sender(ssn, "pairs-send");
    pn_terminus_set_address(pn_link_target(p->link), address);
  } else {
    p->link = pn_receiver(ssn, "pairs-receive");
    pn_terminus_set_address(pn_link_source(p->link), address);
  }
  pn_link_open(p->link);
  if (!p->sender) pn_link_flow(p->link, PAIRS_CREDIT);
}

static void pairs_tick(void) {
  int64_t t = now_ns();
  if (t >= pr.deadline) { pairs_finish(1); return; }
  if (pr.started) {
    if (t >= pr.last + PAIRS_DRAIN_NS) { pairs_finish(0); return; }
    for (long i = pr.n; i < 2 * pr.n; i++) {
      pair_end_t *p = &pr.ends[i];
      if (!p->woken && p->next_send <= t && p->next_send < pr.last) {
        p->woken = 1;
        pn_connection_wake(p->conn);
      }
    }
  }
  pn_proactor_set_timeout(app.proactor, PAIRS_TICK_MS);
}

static void pairs_message(pair_end_t *p, pn_delivery_t *d) {
  int64_t t = now_ns();
  size_t n = pn_delivery_pending(d);
  if (n > app.buf_cap) {
    free(app.buf);
    app.buf_cap = n * 2;
    app.buf = xmalloc(app.buf_cap);
  }
  ssize_t got = pn_link_recv(p->link, app.buf, n);
  scan_t s;
  scan_message((const uint8_t *)app.buf, got < 0 ? 0 : (size_t)got, &s);
  pr.received++;
  if (s.body && s.body_len >= 8) {
    int64_t sent;
    memcpy(&sent, s.body, sizeof sent);
    if (sent >= pr.first && sent < pr.last) {
      pr.received_in_window++;
      record_latency(t - sent);
    }
  }
  pn_delivery_update(d, PN_ACCEPTED);
  pn_delivery_settle(d);
  if (pn_link_credit(p->link) <= PAIRS_CREDIT / 2)
    pn_link_flow(p->link, PAIRS_CREDIT - pn_link_credit(p->link));
}

static void pairs_handle(pn_event_t *e) {
  pn_connection_t *c = pn_event_connection(e);
  pair_end_t *p = c ? pn_connection_get_context(c) : NULL;
  pn_link_t *l = pn_event_link(e);
  switch (pn_event_type(e)) {
  case PN_CONNECTION_INIT:
    pairs_init(p);
    break;
  case PN_LINK_REMOTE_OPEN:
    if (++pr.linked == 2 * pr.n && !pr.started) { /* every link attached: the clock starts */
      int64_t start = now_ns() + 100000000;
      pr.period = (int64_t)(1e9 / pr.rate);
      pr.first = start + (int64_t)(pr.warmup * 1e9);
      pr.last = pr.first + (int64_t)(pr.seconds * 1e9);
      for (long i = 0; i < pr.n; i++) /* phases spread evenly over one period */
        pr.ends[pr.n + i].next_send = start + pr.period * i / pr.n;
      pr.started = 1;
      printf("window %lld %lld\n", (long long)pr.first, (long long)pr.last); /* CLOCK_MONOTONIC ns */
      fflush(stdout);
    }
    break;
  case PN_CONNECTION_WAKE:
    if (app.done) { pn_connection_close(c); break; }
    p->woken = 0;
    if (p->sender) pairs_send(p);
    break;
  case PN_LINK_FLOW:
    if (p->sender && pr.started && !app.done) pairs_send(p);
    break;
  case PN_DELIVERY: {
    pn_delivery_t *d = pn_event_delivery(e);
    if (pn_link_is_sender(l)) {
      uint64_t st = pn_delivery_remote_state(d);
      int terminal = st >= PN_ACCEPTED && st <= PN_MODIFIED;
      if (!terminal && !pn_delivery_settled(d)) break;
      app.outcomes[terminal ? st - PN_ACCEPTED : 4]++;
      pn_delivery_settle(d);
    } else if (pn_delivery_readable(d) && !pn_delivery_partial(d)) {
      if (app.done) pn_delivery_settle(d);
      else pairs_message(p, d);
    }
    break;
  }
  case PN_LINK_REMOTE_CLOSE:
  case PN_LINK_REMOTE_DETACH:
    check(pn_link_remote_condition(l), "link closed by peer");
    if (!app.done) die("link closed by peer", pn_link_name(l));
    pn_link_close(l);
    break;
  case PN_CONNECTION_REMOTE_CLOSE:
    check(pn_connection_remote_condition(c), "connection closed by peer");
    if (!app.done) die("connection closed by peer", NULL);
    pn_connection_close(c);
    break;
  case PN_TRANSPORT_CLOSED:
    check(pn_transport_condition(pn_event_transport(e)), "transport error");
    if (!app.done) die("connection closed", NULL);
    if (++pr.closed == 2 * pr.n) exit(0);
    break;
  case PN_PROACTOR_TIMEOUT:
    if (app.done) exit(0); /* peers did not close in time: the result is out anyway */
    pairs_tick();
    break;
  case PN_PROACTOR_INTERRUPT:
    if (got_signal) { pairs_finish(1); exit(128 + got_signal); }
    break;
  default:
    break;
  }
}

/* ---- main ----------------------------------------------------------------------------------- */

static void on_signal(int sig) {
  got_signal = sig;
  pn_proactor_interrupt(app.proactor);
}

static void usage(const char *msg) {
  fprintf(stderr,
          "%s\nusage:\n"
          "  loadgen send     [--host H] [--port P] --address A --count N [--size S]\n"
          "                   [--presettled] [--window W]\n"
          "  loadgen receive  [--host H] [--port P] --address A --count N [--credit C]\n"
          "  loadgen listen   [--host H] [--port P] [--count N] [--credit C] [--echo]\n"
          "  loadgen pingpong [--host H] [--port P] --address A --reply-address R --count N\n"
          "                   [--size S]\n"
          "  loadgen echo     [--host H] [--port P] --address A [--count N] [--credit C]\n"
          "  loadgen pairs    [--host H] [--port P] --pairs N --rate R --seconds S [--warmup W]\n"
          "                   [--address PREFIX] [--size S]\n"
          "every mode: [--timeout SECONDS] (default 60, 0 = none)\n"
          "client modes: [--ssl-ca FILE] (TLS, the peer's certificate checked against FILE)\n",
          msg);
  exit(1);
}

static long parse_long(const char *opt, const char *v, long min) {
  char *end;
  long n = strtol(v, &end, 10);
  if (*v == 0 || *end != 0 || n < min) {
    fprintf(stderr, "loadgen: %s needs an integer >= %ld, got '%s'\n", opt, min, v);
    exit(1);
  }
  return n;
}

static double parse_seconds(const char *opt, const char *v) {
  char *end;
  double d = strtod(v, &end);
  if (*v == 0 || *end != 0 || !(d >= 0) || d > 4e6) {
    fprintf(stderr, "loadgen: %s needs a number of seconds >= 0, got '%s'\n", opt, v);
    exit(1);
  }
  return d;
}

static void parse_args(int argc, char **argv) {
  int m;
  if (argc < 2) usage("loadgen: no mode given");
  for (m = 0; m < N_MODES && strcmp(argv[1], MODE_NAMES[m]) != 0; m++) {}
  if (m == N_MODES) usage("loadgen: unknown mode");
  app.mode = (enum mode)m;
  app.host = "127.0.0.1";
  app.port = "5672";
  app.size = 100;
  app.window = app.credit = 1000;
  app.timeout_s = 60;
  for (int i = 2; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(o, "--presettled")) { app.presettled = 1; continue; }
    if (!strcmp(o, "--echo")) { app.echo = 1; continue; }
    if (!v) usage("loadgen: option without a value");
    i++;
    if (!strcmp(o, "--host")) app.host = v;
    else if (!strcmp(o, "--port")) app.port = v;
    else if (!strcmp(o, "--address")) app.address = v;
    else if (!strcmp(o, "--reply-address")) app.reply_address = v;
    else if (!strcmp(o, "--count")) app.count = parse_long(o, v, 1);
    else if (!strcmp(o, "--size")) app.size = parse_long(o, v, 8);
    else if (!strcmp(o, "--window")) app.window = parse_long(o, v, 1);
    else if (!strcmp(o, "--credit")) app.credit = parse_long(o, v, 1);
    else if (!strcmp(o, "--timeout")) app.timeout_s = parse_seconds(o, v);
    else if (!strcmp(o, "--ssl-ca")) app.ssl_ca = v;
    else if (!strcmp(o, "--pairs")) pr.n = parse_long(o, v, 1);
    else if (!strcmp(o, "--rate")) pr.rate = parse_seconds(o, v);
    else if (!strcmp(o, "--seconds")) pr.seconds = parse_seconds(o, v);
    else if (!strcmp(o, "--warmup")) pr.warmup = parse_seconds(o, v);
    else usage("loadgen: unknown option");
  }
  if (app.mode == PAIRS) {
    if (!app.address) app.address = "pairs-";
    if (!pr.n || !(pr.rate > 0) || !(pr.seconds > 0)) usage("loadgen: pairs needs --pairs, --rate and --seconds");
    if (app.ssl_ca) usage("loadgen: pairs has no --ssl-ca");
    return;
  }
  if (app.mode != LISTEN && !app.address) usage("loadgen: --address is required");
  if (app.mode == PINGPONG && !app.reply_address) usage("loadgen: --reply-address is required");
  if ((app.mode == SEND || app.mode == RECEIVE || app.mode == PINGPONG) && !app.count)
    usage("loadgen: --count is required");
  if (app.ssl_ca && app.mode == LISTEN) usage("loadgen: --ssl-ca is for client modes");
  if (app.credit > 1L << 30 || app.window > 1L << 30) usage("loadgen: --credit/--window too large");
  if (app.mode == PINGPONG) app.credit = 10;
}

int main(int argc, char **argv) {
  char addr[PN_MAX_ADDR];
  parse_args(argc, argv);
  if (app.mode == SEND || app.mode == PAIRS) build_template(NULL, NULL);
  if (app.mode == PINGPONG) build_template(app.address, app.reply_address);
  if (app.count && app.mode != SEND && app.mode != ECHO && !app.echo) {
    app.lat_cap = app.count; /* preallocated: no growth while measuring */
    app.lat = xmalloc((size_t)app.count * sizeof *app.lat);
  }
  app.buf_cap = 65536;
  app.buf = xmalloc(app.buf_cap);

  app.proactor = pn_proactor();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  signal(SIGPIPE, SIG_IGN);

  pn_proactor_addr(addr, sizeof addr, app.host, app.port);
  if (app.mode == PAIRS) {
    pairs_start(addr);
  } else if (app.mode == LISTEN) {
    app.listener = pn_listener();
    pn_proactor_listen(app.proactor, app.listener, addr, 64);
  } else if (app.ssl_ca) {
    pn_transport_t *t = pn_transport();
    pn_ssl_domain_t *d = pn_ssl_domain(PN_SSL_MODE_CLIENT);
    if (!d || pn_ssl_domain_set_trusted_ca_db(d, app.ssl_ca) ||
        pn_ssl_domain_set_peer_authentication(d, PN_SSL_VERIFY_PEER, NULL) || pn_ssl_init(pn_ssl(t), d, NULL))
      die("cannot set up TLS with", app.ssl_ca);
    pn_ssl_domain_free(d);
    pn_proactor_connect2(app.proactor, NULL, t, addr);
  } else {
    pn_proactor_connect2(app.proactor, NULL, NULL, addr);
  }
  if (app.timeout_s > 0 && app.mode != PAIRS) /* pairs: its own ticker watches the deadline */
    pn_proactor_set_timeout(app.proactor, (pn_millis_t)(app.timeout_s * 1000 + 0.5));

  for (;;) {
    pn_event_batch_t *batch = pn_proactor_wait(app.proactor);
    pn_event_t *e;
    int inactive = 0;
    while ((e = pn_event_batch_next(batch))) {
      if (pn_event_type(e) == PN_PROACTOR_INACTIVE) inactive = 1;
      handle(e);
    }
    if (app.want_pump && !app.done) { /* one burst of sends per batch */
      app.want_pump = 0;
      pump();
    }
    pn_proactor_done(app.proactor, batch);
    if (app.done && (inactive || (app.mode != PAIRS && app.nconns == 0 && !app.listener))) break;
  }
  return 0;
}
