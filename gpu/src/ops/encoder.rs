//! The encoder ops record into: consecutive kernel launches share one
//! compute pass (wgpu costs a few µs of CPU per pass, and a decode step has
//! hundreds of launches); a copy or clear ends the pass. wgpu still orders
//! the launches inside a pass by barriers where their buffers' uses
//! conflict, as it does between passes.

/// A command encoder with an open compute pass for launches.
#[derive(Debug)]
pub struct Encoder {
    // Declared first: dropped (ended) before the encoder it came from.
    pass: Option<wgpu::ComputePass<'static>>,
    enc: wgpu::CommandEncoder,
}

impl Encoder {
    /// A new encoder on `device`.
    pub fn new(device: &wgpu::Device, label: &str) -> Self {
        Self::from(
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) }),
        )
    }

    /// The open compute pass, begun if there is none.
    pub(crate) fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let enc = &mut self.enc;
        self.pass.get_or_insert_with(|| {
            enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("launches"),
                timestamp_writes: None,
            })
            .forget_lifetime()
        })
    }

    /// A compute pass of its own for one launch (profiling on adapters that
    /// cannot write timestamps inside a pass); ends the open one.
    pub(crate) fn own_pass(
        &mut self,
        timestamp_writes: wgpu::ComputePassTimestampWrites<'_>,
    ) -> wgpu::ComputePass<'_> {
        self.pass = None;
        self.enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("launch"),
            timestamp_writes: Some(timestamp_writes),
        })
    }

    /// The command encoder, for copies and clears: ends the open pass.
    pub fn commands(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.enc
    }

    /// The command encoder with every pass ended (to submit it).
    pub fn into_inner(mut self) -> wgpu::CommandEncoder {
        self.pass = None;
        self.enc
    }

    /// The finished command buffer.
    pub fn finish(self) -> wgpu::CommandBuffer {
        self.into_inner().finish()
    }
}

impl From<wgpu::CommandEncoder> for Encoder {
    fn from(enc: wgpu::CommandEncoder) -> Self {
        Self { pass: None, enc }
    }
}
