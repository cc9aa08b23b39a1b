// Read a NumPy .npy file (format 1.0–3.0) of little-endian float64 or float32 in C order: the kernels ntklab stores.

/** {shape: number[], data: Float64Array|Float32Array} of an .npy file's bytes; throws on any other layout. */
export function parseNpy(buffer) {
  const bytes = new Uint8Array(buffer);
  const magic = String.fromCharCode(...bytes.slice(1, 6));
  if (bytes[0] !== 0x93 || magic !== "NUMPY") throw new Error("not an .npy file");
  const view = new DataView(buffer);
  const major = bytes[6];
  const headerLength = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = major === 1 ? 10 : 12;
  const header = new TextDecoder().decode(bytes.slice(start, start + headerLength));
  const descr = /'descr':\s*'([^']+)'/.exec(header)?.[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error("Fortran-ordered .npy is not supported");
  const shape = (/'shape':\s*\(([^)]*)\)/.exec(header)?.[1] || "").split(",").filter((s) => s.trim()).map(Number);
  const offset = start + headerLength;
  const count = shape.reduce((a, b) => a * b, 1);
  if (descr === "<f8") return { shape, data: new Float64Array(buffer.slice(offset, offset + 8 * count)) };
  if (descr === "<f4") return { shape, data: new Float32Array(buffer.slice(offset, offset + 4 * count)) };
  throw new Error(`unsupported .npy dtype ${descr}`);
}
