// Greedy token choice: out[0] = the index of the largest value of one row
// of `act` logits (f32 or f16), with the CPU `argmax`'s semantics: the
// first index on ties, NaN never wins, an all-NaN row gives the last index.
// One workgroup: each lane scans a stride of the row in increasing order,
// eight loads issued before their compares (a lone load per iteration would
// leave the lanes waiting on memory latency), then a tree over workgroup
// memory (a tie there goes to the lower index).
// Values are compared as order-preserving integer keys of their f32 bits,
// so no compiler can flush a subnormal to zero, and -0 equals +0 as on the
// CPU. Key 0 is no value of any float (the smallest, -inf, is 0x007fffff),
// so it marks "nothing but NaN so far".

struct Params {
    // Values in the row.
    n: u32,
    // Element index of the row's first value in `logits`.
    first: u32,
    _pad0: u32,
    _pad1: u32,
}

const WG: u32 = 256u;

var<immediate> params: Params;
@group(0) @binding(0) var<storage, read> logits: array<act>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;

var<workgroup> keys: array<u32, WG>;
var<workgroup> idxs: array<u32, WG>;

// The ordering key of `v`, or 0 for NaN.
fn order_key(v: f32) -> u32 {
    var b = bitcast<u32>(v);
    if (b & 0x7fffffffu) > 0x7f800000u {
        return 0u;
    }
    if b == 0x80000000u {
        b = 0u;
    }
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// The key of element `i` of the row, 0 past its end (the load clamped,
// so it needs no branch).
fn key_at(i: u32, n: u32) -> u32 {
    let v = f32(logits[params.first + min(i, n - 1u)]);
    return select(order_key(v), 0u, i >= n);
}

@compute @workgroup_size(256)
fn argmax(@builtin(local_invocation_index) lid: u32) {
    let n = params.n;
    var key = 0u;
    var idx = 0u;
    for (var base = lid; base < n; base += 8u * WG) {
        var k: array<u32, 8>;
        for (var u = 0u; u < 8u; u++) {
            k[u] = key_at(base + u * WG, n);
        }
        for (var u = 0u; u < 8u; u++) {
            if k[u] > key {
                key = k[u];
                idx = base + u * WG;
            }
        }
    }
    keys[lid] = key;
    idxs[lid] = idx;
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if lid < s {
            let k = keys[lid + s];
            let j = idxs[lid + s];
            if k > keys[lid] || (k == keys[lid] && j < idxs[lid]) {
                keys[lid] = k;
                idxs[lid] = j;
            }
        }
    }
    if lid == 0u {
        out[0] = select(idxs[0], n - 1u, keys[0] == 0u);
    }
}
