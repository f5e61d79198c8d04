// Runs M-Lab's own ndt7 JavaScript client (the npm package @m-lab/ndt7,
// installed by the test) under Node.js against one server, and prints
// what it reported as one JSON line.
//
// The package is written for browsers: it runs each subtest in a Web
// Worker and uses the browser's WebSocket. Node has WebSocket (20 with
// --experimental-websocket, 22 and later by default) but not Web
// Workers, so this file gives it a small Worker of our own: the worker
// script runs in a vm context whose `self`, `postMessage` and timers are
// wired to the page side, as a browser would.
//
// usage: node --experimental-websocket ndt7-js-node.cjs NODE_MODULES HOST:PORT

'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [modules, server] = process.argv.slice(2);
if (typeof WebSocket === 'undefined') {
  console.error('this Node.js has no WebSocket (Node 20 needs --experimental-websocket)');
  process.exit(3);
}
const pkg = path.join(modules, '@m-lab', 'ndt7', 'src');

class Worker {
  constructor(file) {
    this.onmessage = null;
    this.timers = new Set();
    const self = {};
    const toPage = (data) => {
      if (this.onmessage) this.onmessage({data});
    };
    const timers = this.timers;
    const context = vm.createContext({
      self,
      postMessage: toPage,
      WebSocket,
      performance,
      Uint8Array,
      console,
      setTimeout: (f, ms) => {
        const t = setTimeout(() => {
          timers.delete(t);
          f();
        }, ms);
        timers.add(t);
        return t;
      },
      clearTimeout: (t) => {
        timers.delete(t);
        clearTimeout(t);
      },
    });
    vm.runInContext(fs.readFileSync(file, 'utf8'), context, {filename: file});
    this.self = self;
  }
  postMessage(data) {
    setImmediate(() => this.self.onmessage({data}));
  }
  terminate() {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }
}
globalThis.Worker = Worker;

const ndt7 = require(path.join(pkg, 'ndt7.js'));
const out = {download: null, upload: null, errors: []};
const started = Date.now();
ndt7
  .test(
    {
      server,
      protocol: 'ws',
      userAcceptedDataPolicy: true,
      metadata: {client_name: 'goodput-test'},
      downloadworkerfile: path.join(pkg, 'ndt7-download-worker.js'),
      uploadworkerfile: path.join(pkg, 'ndt7-upload-worker.js'),
    },
    {
      error: (e) => out.errors.push(String(e)),
      downloadComplete: (d) => {
        out.download = d;
      },
      uploadComplete: (d) => {
        out.upload = d;
      },
    },
  )
  .then((code) => {
    out.code = code;
    out.seconds = (Date.now() - started) / 1000;
    console.log(JSON.stringify(out));
    process.exit(0);
  });
