//! A timeline of a pass: host-side spans per lane (reads/uploads, kernel
//! recording, submits, waits), written as a Chrome/Perfetto trace.

use std::time::Instant;

use serde::Serialize;

/// The lane an event belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    /// File/RAM reads into the ring and the copies recorded after them.
    Upload,
    /// Recording a block's kernels.
    Compute,
    /// `queue.submit`.
    Submit,
    /// Waiting for the GPU or a ring slot (a stall).
    Wait,
}

/// One span.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// What happened.
    pub name: String,
    /// Lane.
    pub lane: Lane,
    /// Start, microseconds since the trace began.
    pub start_us: f64,
    /// Duration in microseconds.
    pub dur_us: f64,
    /// Bytes moved, if any.
    pub bytes: u64,
}

/// A recorder of [`Event`]s; disabled traces record nothing.
#[derive(Debug, Clone)]
pub struct Trace {
    origin: Instant,
    enabled: bool,
    /// Events in the order they ended.
    pub events: Vec<Event>,
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

impl Trace {
    /// A recording trace.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
            enabled: true,
            events: Vec::new(),
        }
    }

    /// A trace that records nothing.
    pub fn disabled() -> Self {
        Self {
            enabled: false,
            ..Self::new()
        }
    }

    /// Marks the start of a span.
    pub fn begin(&self) -> Instant {
        Instant::now()
    }

    /// Records a span that started at `t`.
    pub fn end(&mut self, t: Instant, lane: Lane, name: &str, bytes: u64) {
        if self.enabled {
            self.events.push(Event {
                name: name.to_owned(),
                lane,
                start_us: t.duration_since(self.origin).as_secs_f64() * 1e6,
                dur_us: t.elapsed().as_secs_f64() * 1e6,
                bytes,
            });
        }
    }

    /// The Chrome trace-event JSON (`chrome://tracing`, Perfetto).
    pub fn to_chrome_json(&self) -> serde_json::Value {
        let events: Vec<serde_json::Value> = self
            .events
            .iter()
            .map(|e| {
                serde_json::json!({
                    "name": e.name, "ph": "X", "pid": 1, "tid": format!("{:?}", e.lane),
                    "ts": e.start_us, "dur": e.dur_us, "args": { "bytes": e.bytes },
                })
            })
            .collect();
        serde_json::json!({ "traceEvents": events, "displayTimeUnit": "ms" })
    }
}

impl Trace {
    /// The same events drawn as an SVG timeline: one lane per [`Lane`],
    /// time left to right, uploads and compute in different colours, waits
    /// (stalls) in red, so a user sees at a glance where a pass waits.
    pub fn to_svg(&self) -> String {
        const LANES: [(Lane, &str, &str); 4] = [
            (Lane::Upload, "reads + uploads", "#4e79a7"),
            (Lane::Compute, "kernel recording", "#59a14f"),
            (Lane::Submit, "submits", "#b07aa1"),
            (Lane::Wait, "waits / stalls", "#e15759"),
        ];
        let (width, left, lane_h, top) = (1200.0, 140.0, 36.0, 30.0);
        let end = self
            .events
            .iter()
            .map(|e| e.start_us + e.dur_us)
            .fold(1.0f64, f64::max);
        let x = |us: f64| left + (width - left - 10.0) * us / end;
        let height = top + lane_h * LANES.len() as f64 + 30.0;
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <text x=\"10\" y=\"18\">pass timeline: {:.2} ms</text>\n",
            end / 1e3
        );
        for (row, (lane, label, colour)) in LANES.iter().enumerate() {
            let y = top + row as f64 * lane_h;
            svg += &format!(
                "<text x=\"10\" y=\"{:.1}\">{label}</text>\n",
                y + lane_h * 0.6
            );
            for e in self.events.iter().filter(|e| e.lane == *lane) {
                let (x0, x1) = (x(e.start_us), x(e.start_us + e.dur_us));
                svg += &format!(
                    "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>{} ({:.3} ms, {} bytes)</title></rect>\n",
                    y + 4.0,
                    (x1 - x0).max(0.5),
                    lane_h - 8.0,
                    escape(&e.name),
                    e.dur_us / 1e3,
                    e.bytes
                );
            }
        }
        svg += &format!(
            "<text x=\"{left}\" y=\"{:.1}\">0 ms</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{:.2} ms</text>\n</svg>\n",
            height - 8.0,
            width - 10.0,
            height - 8.0,
            end / 1e3
        );
        svg
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
