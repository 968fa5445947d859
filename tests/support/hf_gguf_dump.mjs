// Test support: what Hugging Face's GGUF parser (@huggingface/gguf, the npm package the Hub
// uses) reads from a file, as one JSON document on stdout, for hf_gguf_test.cpp to compare with
// libgguf's reader. Usage: node hf_gguf_dump.mjs NODE_PREFIX FILE.gguf
// 64-bit integers are printed as decimal strings and non-finite floats as "nan"/"inf"/"-inf",
// so nothing is lost on the way through JSON.
import { pathToFileURL } from "node:url";

const [prefix, file] = process.argv.slice(2);
const mod = await import(
  pathToFileURL(`${prefix}/node_modules/@huggingface/gguf/dist/index.mjs`).href);
const r = await mod.gguf(file, { allowLocalFile: true, typedMetadata: true });

const plain = (v) => {
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number" && !Number.isFinite(v)) {
    return Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf";
  }
  return v;
};
const metadata = [];
for (const [key, entry] of Object.entries(r.typedMetadata)) {
  if (key === "version" || key === "tensor_count" || key === "kv_count") continue;
  const out = { key, type: entry.type };
  if (Array.isArray(entry.value)) {
    out.sub_type = entry.subType;
    out.value = entry.value.map(plain);
  } else {
    out.value = plain(entry.value);
  }
  metadata.push(out);
}
const doc = {
  version: r.metadata.version,
  little_endian: r.littleEndian,
  tensor_data_offset: r.tensorDataOffset.toString(),
  metadata,
  tensors: r.tensorInfos.map((t) => ({
    name: t.name,
    dtype: t.dtype,
    shape: t.shape.map((d) => d.toString()),
    offset: t.offset.toString(),
  })),
};
process.stdout.write(JSON.stringify(doc));
