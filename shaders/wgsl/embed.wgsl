// Embedding lookup: out[t, c] = table[ids[t], c], decoded to f32 and stored
// as `act` (f32 or f16).
// The table is read as raw 32-bit words (stored_float.wgsl decodes them).
// DTYPE: 0 = f32, 1 = f16, 2 = bf16 (16-bit values little-endian, element
// e in the low half of word e/2 when e is even). Ids >= vocab give a zero row.
// A table larger than one storage binding is gathered in row chunks, one
// dispatch each: `table` is rows first_row..end_row, and a dispatch writes
// only the tokens whose ids fall there (the last chunk also the zero rows).
//
// needs: stored_value

struct Params {
    n_tokens: u32,
    cols: u32,
    first_row: u32,
    end_row: u32,
    vocab: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const WG: u32 = 256u;

override DTYPE: u32 = 0u;

var<immediate> params: Params;
@group(0) @binding(1) var<storage, read> table: array<u32>;
@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<act>;

fn load(e: u32) -> f32 {
    return stored_value(table[select(e / 2u, e, DTYPE == 0u)], e, DTYPE);
}

@compute @workgroup_size(256)
fn gather(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let idx = (wid.y * nwg.x + wid.x) * WG + lid;
    let cols = params.cols;
    if idx >= params.n_tokens * cols {
        return;
    }
    let t = idx / cols;
    let c = idx % cols;
    let id = ids[t];
    if id < params.first_row {
        return;
    }
    if id >= params.end_row {
        if params.end_row == params.vocab {
            out[idx] = act(0.0);
        }
        return;
    }
    out[idx] = act(load((id - params.first_row) * cols + c));
}
