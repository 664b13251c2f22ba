//! Randomly initialised VAEs in BFL `ae.safetensors` layout (encoder and
//! decoder), for benchmarks and tests: the real Flux shape
//! ([`VaeConfig::flux`]) or any config. Convolutions N(0, 1/fan_in), biases
//! N(0, 0.02), GroupNorm weights U(0.5, 1.5) and biases N(0, 0.1) (so a port
//! that ignores them fails). Written through `crate::synth::write_file`
//! (chunked, parallel, atomic).

use std::path::Path;

use super::VaeError;
use super::config::VaeConfig;
use crate::synth::{Init, SynthDtype, SynthOptions, SynthTensor, write_file};

/// Every tensor of an `ae.safetensors` for `c`, encoder first.
pub fn tensors(c: &VaeConfig) -> Vec<SynthTensor> {
    let mut out = Vec::new();
    let mut conv = |name: String, cout: usize, cin: usize, k: usize| {
        out.push(SynthTensor {
            name: format!("{name}.weight"),
            shape: vec![cout, cin, k, k],
            init: Init::Normal(1.0 / ((cin * k * k) as f32).sqrt()),
        });
        out.push(SynthTensor {
            name: format!("{name}.bias"),
            shape: vec![cout],
            init: Init::Normal(0.02),
        });
    };
    let mut norms: Vec<(String, usize)> = Vec::new();
    let resnet = |conv: &mut dyn FnMut(String, usize, usize, usize),
                  norms: &mut Vec<(String, usize)>,
                  p: String,
                  cin: usize,
                  cout: usize| {
        norms.push((format!("{p}.norm1"), cin));
        conv(format!("{p}.conv1"), cout, cin, 3);
        norms.push((format!("{p}.norm2"), cout));
        conv(format!("{p}.conv2"), cout, cout, 3);
        if cin != cout {
            conv(format!("{p}.nin_shortcut"), cout, cin, 1);
        }
    };
    let (n, m) = (c.levels(), c.mid_channels());
    let mid = |conv: &mut dyn FnMut(String, usize, usize, usize),
               norms: &mut Vec<(String, usize)>,
               part: &str| {
        resnet(conv, norms, format!("{part}.mid.block_1"), m, m);
        norms.push((format!("{part}.mid.attn_1.norm"), m));
        for l in ["q", "k", "v", "proj_out"] {
            conv(format!("{part}.mid.attn_1.{l}"), m, m, 1);
        }
        resnet(conv, norms, format!("{part}.mid.block_2"), m, m);
    };
    // Encoder.
    conv("encoder.conv_in".into(), c.channels(0), c.image_channels, 3);
    for i in 0..n {
        let cin = if i == 0 {
            c.channels(0)
        } else {
            c.channels(i - 1)
        };
        for j in 0..c.num_res_blocks {
            let ci = if j == 0 { cin } else { c.channels(i) };
            resnet(
                &mut conv,
                &mut norms,
                format!("encoder.down.{i}.block.{j}"),
                ci,
                c.channels(i),
            );
        }
        if i + 1 < n {
            conv(
                format!("encoder.down.{i}.downsample.conv"),
                c.channels(i),
                c.channels(i),
                3,
            );
        }
    }
    mid(&mut conv, &mut norms, "encoder");
    norms.push(("encoder.norm_out".into(), m));
    conv("encoder.conv_out".into(), 2 * c.z_channels, m, 3);
    // Decoder.
    conv("decoder.conv_in".into(), m, c.z_channels, 3);
    mid(&mut conv, &mut norms, "decoder");
    for i in (0..n).rev() {
        let cin = if i + 1 == n { m } else { c.channels(i + 1) };
        for j in 0..=c.num_res_blocks {
            let ci = if j == 0 { cin } else { c.channels(i) };
            resnet(
                &mut conv,
                &mut norms,
                format!("decoder.up.{i}.block.{j}"),
                ci,
                c.channels(i),
            );
        }
        if i > 0 {
            conv(
                format!("decoder.up.{i}.upsample.conv"),
                c.channels(i),
                c.channels(i),
                3,
            );
        }
    }
    norms.push(("decoder.norm_out".into(), c.channels(0)));
    conv(
        "decoder.conv_out".into(),
        c.image_channels,
        c.channels(0),
        3,
    );
    for (name, ch) in norms {
        out.push(SynthTensor {
            name: format!("{name}.weight"),
            shape: vec![ch],
            init: Init::Uniform(0.5, 1.5),
        });
        out.push(SynthTensor {
            name: format!("{name}.bias"),
            shape: vec![ch],
            init: Init::Normal(0.1),
        });
    }
    out
}

/// Writes a random-weight `ae.safetensors` for `config` at `path`
/// (atomically), stored as `dtype`, drawn from `seed`; returns the bytes of
/// tensor data.
pub fn write(
    path: &Path,
    config: &VaeConfig,
    dtype: SynthDtype,
    seed: u64,
) -> Result<u64, VaeError> {
    let _span = tracing::info_span!("vae_synth", path = %path.display()).entered();
    config.validate().map_err(|why| VaeError::Config {
        path: path.to_owned(),
        why,
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| VaeError::Io {
            path: dir.to_owned(),
            source,
        })?;
    }
    let opts = SynthOptions {
        dtype,
        seed,
        ..SynthOptions::default()
    };
    write_file(path, &tensors(config), opts, &mut |_, _| {}).map_err(|e| match e {
        crate::error::ModelError::Runtime(r) => VaeError::Runtime(r),
        other => VaeError::Weights {
            path: path.to_owned(),
            why: other.to_string(),
        },
    })
}
