//! Matrix FLOPs of one VAE decode per runtime block (`plan`'s compute
//! time): 2·H·W·C_out·C_in·k² per convolution at the resolution it runs at
//! (an upsampling convolution at twice its level's), and 4·(h·w)²·C for
//! the mid block's attention. Norms and activations move bytes, not
//! products.

use super::checkpoint::{Layer, Names, Stage, stages};
use super::config::VaeConfig;

/// FLOPs of each block of a decode of `batch` latents of `h × w`, in the
/// order of `VaeCheckpoint::blocks`.
pub fn block_flops(c: &VaeConfig, batch: usize, h: usize, w: usize) -> Vec<u64> {
    let nm = Names {
        prefix: String::new(),
    };
    let latent = (h * w) as u64;
    let n = c.levels();
    stages(c)
        .into_iter()
        .map(|st| {
            let pixels = match st {
                Stage::Up(i) => latent << (2 * (n - 1 - i)),
                Stage::Out => latent << (2 * (n - 1)),
                _ => latent,
            };
            let convs: u64 = st
                .layers(c, &nm)
                .iter()
                .map(|l| match l {
                    Layer::Conv { name, cout, cin, k } => {
                        let at = if name.contains("upsample") {
                            4 * pixels
                        } else {
                            pixels
                        };
                        2 * at * (cout * cin * k * k) as u64
                    }
                    Layer::Norm { .. } => 0,
                })
                .sum();
            let attention = match st {
                Stage::Mid => 4 * latent * latent * c.mid_channels() as u64,
                _ => 0,
            };
            batch as u64 * (convs + attention)
        })
        .collect()
}
