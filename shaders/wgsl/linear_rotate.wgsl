// Group rotation (ConvRot), after linear_fht.wgsl: every group of G
// consecutive values of a row is multiplied by the G x G Hadamard matrix /
// sqrt(G) (the radix-4 transform of the fragment). One workgroup per
// (run of CH values, row): CH / G whole groups at once in workgroup memory
// (one group a workgroup left FLUX.1's rotations at 0.13 of the read rate
// on the H100), each transformed as alone, so the values are the same.
// Dispatch: (K / CH, rows, 1). Reads `act` (f32 or f16), writes f32, so the
// activation quantization after it sees the exact f32 sums.
//
// needs: fht
// provides: G, fht_v

// The group size: a power of 4, 4 <= G <= 4096.
override G: u32 = 256u;
// Values a workgroup transforms: a multiple of G dividing K, at most 4096.
override CH: u32 = 256u;

struct Params {
    rows: u32,
    k: u32,
    _pad0: u32,
    _pad1: u32,
    // The linear kernels' 32-byte immediates are shared by every module.
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
}

@group(0) @binding(0) var<storage, read> x: array<act>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
var<immediate> p: Params;

var<workgroup> fht_v: array<f32, 4096>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
    let row = wid.y;
    if row >= p.rows {
        return;
    }
    let base = row * p.k + wid.x * CH;
    for (var i = lid; i < CH; i += 256u) {
        fht_v[i] = f32(x[base + i]);
    }
    workgroupBarrier();
    fht(lid, 256u, CH);
    for (var i = lid; i < CH; i += 256u) {
        y[base + i] = fht_v[i];
    }
}
