// Memory-bandwidth baselines for `dynvram bench linear`: what a shader (not
// the copy engine) reaches streaming a buffer, the limit the GEMVs are held
// to. Grid-stride over 16-byte elements, consecutive invocations on
// consecutive elements.

@group(0) @binding(0) var<storage, read> src: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<u32>>;

// Invocations per workgroup.
override WGS: u32 = 256u;

// Copies src into dst.
@compute @workgroup_size(WGS)
fn stream_copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    for (var i = gid.x; i < n; i += nwg.x * WGS) {
        dst[i] = src[i];
    }
}

// Reads src only; the xor of everything read is stored only where it
// equals a value no input has, so the loads cannot be dropped.
@compute @workgroup_size(WGS)
fn stream_read(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n = arrayLength(&src);
    var acc = vec4<u32>(0u);
    for (var i = gid.x; i < n; i += nwg.x * WGS) {
        acc ^= src[i];
    }
    if all(acc == vec4<u32>(0x9e3779b9u)) {
        dst[0] = acc;
    }
}
