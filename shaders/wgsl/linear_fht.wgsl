// The radix-4 fast Walsh-Hadamard transform of ConvRot (conformance README
// §4.1), shared by linear_rotate.wgsl and linear_rotate_quant.wgsl: stages
// of strides 1, 4, 16, … G/4 in the CUDA kernels' order, bit for bit the
// same f32 sums. The body declares `var<workgroup> fht_v: array<f32, …>`
// and the override G (a power of 4).
//
// needs: G, fht_v
// provides: fht

// Transforms, in place, every group of G consecutive values of
// fht_v[0..len) (len a multiple of G); invocation `lid` of `threads` takes
// butterflies lid, lid + threads, … Call after a barrier, in uniform control
// flow; ends with a barrier.
fn fht(lid: u32, threads: u32, len: u32) {
    for (var s = 1u; s < G; s = s * 4u) {
        // Butterfly t of stride s: (t / s) * 4s + t % s stays inside t's
        // group because s divides G / 4.
        for (var t = lid; t < len / 4u; t += threads) {
            let i = (t / s) * 4u * s + t % s;
            let a = fht_v[i];
            let b = fht_v[i + s];
            let c = fht_v[i + 2u * s];
            let d = fht_v[i + 3u * s];
            fht_v[i] = 0.5 * (((a + b) + c) - d);
            fht_v[i + s] = 0.5 * (((a + b) - c) + d);
            fht_v[i + 2u * s] = 0.5 * (((a - b) + c) + d);
            fht_v[i + 3u * s] = 0.5 * (((-a + b) + c) + d);
        }
        workgroupBarrier();
    }
}
