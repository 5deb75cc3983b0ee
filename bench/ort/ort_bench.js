// ONNX Runtime's CPU attention on one problem, timed like `attn bench`:
// non-causal: MultiHeadAttention (com.microsoft) on (B, S, H*D) inputs;
// causal: GroupQueryAttention (com.microsoft; causal by definition, here
// with kv_num_heads = num_heads and no past), ORT's fast causal CPU path
// (MultiHeadAttention's unidirectional=1 is several times slower). The
// models are built here, byte by byte (protobuf), so nothing but the npm
// package is downloaded.
// usage: node ort_bench.js B H S D causal(0|1) threads min_time_s
// prints one JSON line: {"impl":"ort", ..., "ms": median, "gflops": ...}
'use strict';
const ort = require('onnxruntime-node');

// ---- a minimal protobuf writer -------------------------------------------------
function varint(n) {
  const out = [];
  let v = BigInt(n);
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v !== 0n) b |= 0x80;
    out.push(b);
  } while (v !== 0n);
  return out;
}
const key = (field, wire) => varint((field << 3) | wire);
const vfield = (field, n) => [...key(field, 0), ...varint(n)];
function bytes(field, arr) { return [...key(field, 2), ...varint(arr.length), ...arr]; }
const str = (field, s) => bytes(field, [...Buffer.from(s, 'utf8')]);
const f32field = (field, x) => { const b = Buffer.alloc(4); b.writeFloatLE(x); return [...key(field, 5), ...b]; };

function valueInfo(name, dims, elem = 1 /* FLOAT; INT32 = 6 */) {
  const shape = dims.flatMap(d => bytes(1, vfield(1, d)));
  const tensorType = [...vfield(1, elem), ...bytes(2, shape)];
  return [...str(1, name), ...bytes(2, bytes(1, tensorType))];
}
function attrInt(name, i) { return [...str(1, name), ...vfield(3, i), ...vfield(20, 2 /* INT */)]; }
function attrFloat(name, f) { return [...str(1, name), ...f32field(2, f), ...vfield(20, 1 /* FLOAT */)]; }

function mhaModel(B, H, S, D, causal) {
  const node = [...str(1, 'q'), ...str(1, 'k'), ...str(1, 'v'), ...str(2, 'out'), ...str(3, 'mha'),
                ...str(4, 'MultiHeadAttention'), ...bytes(5, attrInt('num_heads', H)),
                ...bytes(5, attrFloat('scale', 1 / Math.sqrt(D))),
                ...(causal ? bytes(5, attrInt('unidirectional', 1)) : []), ...str(7, 'com.microsoft')];
  const graph = [...bytes(1, node), ...str(2, 'attn'), ...bytes(11, valueInfo('q', [B, S, H * D])),
                 ...bytes(11, valueInfo('k', [B, S, H * D])), ...bytes(11, valueInfo('v', [B, S, H * D])),
                 ...bytes(12, valueInfo('out', [B, S, H * D]))];
  return modelOf(graph);
}

function modelOf(graph) {
  const model = [...vfield(1, 8), ...str(2, 'libattn-bench'), ...bytes(7, graph),
                 ...bytes(8, [...str(1, ''), ...vfield(2, 17)]),
                 ...bytes(8, [...str(1, 'com.microsoft'), ...vfield(2, 1)])];
  return Uint8Array.from(model);
}

// causal prompt attention: GroupQueryAttention with no past (inputs 3, 4 empty)
function gqaModel(B, H, S, D) {
  const node = [...str(1, 'q'), ...str(1, 'k'), ...str(1, 'v'), ...str(1, ''), ...str(1, ''), ...str(1, 'seqlens_k'),
                ...str(1, 'total_len'), ...str(2, 'out'), ...str(2, 'present_k'), ...str(2, 'present_v'),
                ...str(3, 'gqa'), ...str(4, 'GroupQueryAttention'), ...bytes(5, attrInt('num_heads', H)),
                ...bytes(5, attrInt('kv_num_heads', H)), ...bytes(5, attrFloat('scale', 1 / Math.sqrt(D))),
                ...str(7, 'com.microsoft')];
  const graph = [...bytes(1, node), ...str(2, 'attn'), ...bytes(11, valueInfo('q', [B, S, H * D])),
                 ...bytes(11, valueInfo('k', [B, S, H * D])), ...bytes(11, valueInfo('v', [B, S, H * D])),
                 ...bytes(11, valueInfo('seqlens_k', [B], 6)), ...bytes(11, valueInfo('total_len', [], 6)),
                 ...bytes(12, valueInfo('out', [B, S, H * D])), ...bytes(12, valueInfo('present_k', [B, H, S, D])),
                 ...bytes(12, valueInfo('present_v', [B, H, S, D]))];
  return modelOf(graph);
}

async function main() {
  const [B, H, S, D, causal, threads, minTime] = process.argv.slice(2).map(Number);
  const session = await ort.InferenceSession.create(causal ? gqaModel(B, H, S, D) : mhaModel(B, H, S, D, 0), {
    intraOpNumThreads: threads, interOpNumThreads: 1, executionMode: 'sequential', graphOptimizationLevel: 'all'});
  const n = B * S * H * D;
  let x = 12345;
  const rnd = () => { x = (x * 1664525 + 1013904223) >>> 0; return (x >>> 8) / 16777216 - 0.5; };
  const feeds = {};
  for (const name of ['q', 'k', 'v']) {
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = rnd();
    feeds[name] = new ort.Tensor('float32', a, [B, S, H * D]);
  }
  if (causal) {
    feeds.seqlens_k = new ort.Tensor('int32', Int32Array.from(Array(B).fill(S - 1)), [B]);
    feeds.total_len = new ort.Tensor('int32', Int32Array.from([S]), []);
  }
  const first = await session.run(feeds); // warm-up
  if (process.env.ORT_DUMP) { // inputs and output as raw float32, for compare.sh's check
    const fs = require('fs');
    for (const name of ['q', 'k', 'v']) fs.writeFileSync(`${process.env.ORT_DUMP}/${name}.f32`, feeds[name].data);
    fs.writeFileSync(`${process.env.ORT_DUMP}/out.f32`, first.out.data);
  }
  const times = [];
  const t0 = process.hrtime.bigint();
  do {
    const t = process.hrtime.bigint();
    await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
  } while (times.length < 3 || (times.length < 200 && Number(process.hrtime.bigint() - t0) / 1e9 < minTime));
  times.sort((a, b) => a - b);
  const ms = times[times.length >> 1];
  const flops = 4 * B * H * S * S * D * (causal ? 0.5 : 1);
  console.log(JSON.stringify({impl: 'ort', kernel: causal ? 'GroupQueryAttention' : 'MultiHeadAttention', version: ort.env.versions ? ort.env.versions.common : '', op: 'forward',
                              B, H, S, D, causal: !!causal, threads, reps: times.length, ms, gflops: flops / ms * 1e-6}));
}
main().catch(e => { console.error('ort_bench: ' + e.message); process.exit(1); });
