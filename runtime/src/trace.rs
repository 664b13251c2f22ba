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
    /// Waiting for the GPU to finish the pass's work.
    Wait,
    /// Staging stalled: a ring slot was still in flight and the uploads
    /// waited for it (recorded only when it happened).
    Stall,
    /// The copy queue's batches as the device ran them (`device_lanes`:
    /// traced passes with a copy queue).
    CopyEngine,
    /// wgpu's submits as the device ran them (the same passes).
    Device,
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

    /// Whether events are recorded.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The moment times are counted from.
    pub fn origin(&self) -> Instant {
        self.origin
    }

    /// Microseconds since [`Self::origin`].
    pub fn now_us(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1e6
    }

    /// Adds spans measured elsewhere (the device lanes).
    pub fn extend(&mut self, events: impl IntoIterator<Item = Event>) {
        if self.enabled {
            self.events.extend(events);
        }
    }

    /// Marks the start of a span.
    pub fn begin(&self) -> Instant {
        Instant::now()
    }

    /// Records a span that started at `t` (`name` is formatted only when
    /// the trace is on: pass `format_args!` on hot paths).
    pub fn end(&mut self, t: Instant, lane: Lane, name: impl std::fmt::Display, bytes: u64) {
        if self.enabled {
            self.events.push(Event {
                name: name.to_string(),
                lane,
                start_us: t.duration_since(self.origin).as_secs_f64() * 1e6,
                dur_us: t.elapsed().as_secs_f64() * 1e6,
                bytes,
            });
        }
    }

    /// Records a span of `dur` that ended now (a wait measured elsewhere,
    /// such as the staging ring's stall time).
    pub fn record_ended(
        &mut self,
        lane: Lane,
        name: impl std::fmt::Display,
        dur: std::time::Duration,
    ) {
        if self.enabled {
            let end = self.now_us();
            let dur_us = dur.as_secs_f64() * 1e6;
            self.events.push(Event {
                name: name.to_string(),
                lane,
                start_us: (end - dur_us).max(0.0),
                dur_us,
                bytes: 0,
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
    /// The same events drawn as an SVG timeline: a named lane per [`Lane`],
    /// a time axis in milliseconds with grid lines, and a legend. Stall
    /// blocks (red) appear only where the staging ring really waited; the
    /// lane says "none" otherwise.
    pub fn to_svg(&self) -> String {
        const ALL: [(Lane, &str, &str); 7] = [
            (Lane::Upload, "reads + uploads", "#4e79a7"),
            (Lane::Compute, "kernel recording", "#59a14f"),
            (Lane::Submit, "submits", "#b07aa1"),
            (Lane::Wait, "waiting for the GPU", "#9c9c9c"),
            (Lane::Stall, "staging stalls", "#e15759"),
            (Lane::CopyEngine, "device: copies", "#f28e2b"),
            (Lane::Device, "device: kernels", "#76b7b2"),
        ];
        // The device lanes only where the pass sampled them.
        let device = |l: Lane| matches!(l, Lane::CopyEngine | Lane::Device);
        let present = |l: Lane| !device(l) || self.events.iter().any(|e| e.lane == l);
        let lanes: Vec<(Lane, &str, &str)> =
            ALL.into_iter().filter(|&(l, _, _)| present(l)).collect();
        let (width, left, right, lane_h, top) = (1200.0, 150.0, 20.0, 36.0, 34.0);
        let end = self
            .events
            .iter()
            .map(|e| e.start_us + e.dur_us)
            .fold(1.0f64, f64::max);
        let plot = width - left - right;
        let x = |us: f64| left + plot * us / end;
        let lanes_bottom = top + lane_h * lanes.len() as f64;
        let axis_y = lanes_bottom + 4.0;
        let legend_y = axis_y + 40.0;
        let height = legend_y + 16.0;
        let streamed: u64 = self
            .events
            .iter()
            .filter(|e| e.lane == Lane::Upload)
            .map(|e| e.bytes)
            .sum();
        let stalls = self.events.iter().filter(|e| e.lane == Lane::Stall).count();
        let mut svg = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"12\">\n\
             <rect width=\"{width}\" height=\"{height}\" fill=\"white\"/>\n\
             <text x=\"10\" y=\"20\" font-size=\"14\">pass timeline: {} in {:.2} ms, {} staging stall{}</text>\n",
            human_bytes(streamed),
            end / 1e3,
            stalls,
            if stalls == 1 { "" } else { "s" }
        );
        // Time axis: ticks at a 1-2-5 step giving at most ~10 ticks.
        let step_ms = nice_step(end / 1e3 / 10.0);
        let mut tick = 0.0f64;
        while tick * 1e3 <= end + 1e-9 {
            let tx = x(tick * 1e3);
            svg += &format!(
                "<line x1=\"{tx:.1}\" y1=\"{top}\" x2=\"{tx:.1}\" y2=\"{axis_y:.1}\" stroke=\"#e0e0e0\"/>\n\
                 <text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n",
                axis_y + 14.0,
                trim_ms(tick)
            );
            tick += step_ms;
        }
        svg += &format!(
            "<line x1=\"{left}\" y1=\"{axis_y:.1}\" x2=\"{:.1}\" y2=\"{axis_y:.1}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">time (ms)</text>\n",
            width - right,
            left + plot / 2.0,
            axis_y + 28.0
        );
        for (row, (lane, label, colour)) in lanes.iter().enumerate() {
            let y = top + row as f64 * lane_h;
            let events: Vec<&Event> = self.events.iter().filter(|e| e.lane == *lane).collect();
            let label = if *lane == Lane::Stall && events.is_empty() {
                format!("{label}: none")
            } else {
                (*label).to_owned()
            };
            svg += &format!(
                "<text x=\"10\" y=\"{:.1}\">{label}</text>\n\
                 <line x1=\"{left}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"#f0f0f0\"/>\n",
                y + lane_h * 0.6,
                y + lane_h,
                width - right,
                y + lane_h
            );
            for e in events {
                let (x0, x1) = (x(e.start_us), x(e.start_us + e.dur_us));
                svg += &format!(
                    "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{colour}\"><title>{} ({:.3} ms{})</title></rect>\n",
                    y + 4.0,
                    (x1 - x0).max(0.5),
                    lane_h - 8.0,
                    escape(&e.name),
                    e.dur_us / 1e3,
                    if e.bytes > 0 {
                        format!(", {}", human_bytes(e.bytes))
                    } else {
                        String::new()
                    }
                );
            }
        }
        // Legend.
        let mut lx = left;
        for &(lane, label, colour) in &lanes {
            if lane == Lane::Stall && stalls == 0 {
                continue;
            }
            svg += &format!(
                "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>\n\
                 <text x=\"{:.1}\" y=\"{legend_y:.1}\">{label}</text>\n",
                legend_y - 10.0,
                lx + 16.0
            );
            lx += 24.0 + 7.0 * label.len() as f64;
        }
        svg += "</svg>\n";
        svg
    }
}

/// The 1-2-5 step at or above `raw` (ms).
fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|&s| s >= raw)
        .unwrap_or(10.0 * mag)
}

/// A tick label: `0`, `0.5`, `12` (no trailing zeros).
fn trim_ms(ms: f64) -> String {
    let s = format!("{ms:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// Bytes as `1.50 MiB`.
fn human_bytes(b: u64) -> String {
    dynvram_memory::Bytes(b).to_string()
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(lane: Lane, name: &str, start_us: f64, dur_us: f64, bytes: u64) -> Event {
        Event {
            name: name.into(),
            lane,
            start_us,
            dur_us,
            bytes,
        }
    }

    #[test]
    fn svg_has_axis_lanes_legend_and_stalls_only_when_there_were_some() {
        let mut t = Trace::new();
        t.events = vec![
            event(Lane::Upload, "stage blocks.1", 0.0, 800.0, 3 << 20),
            event(Lane::Compute, "record blocks.0", 100.0, 500.0, 0),
            event(Lane::Submit, "submit", 600.0, 50.0, 0),
            event(Lane::Wait, "wait for GPU", 650.0, 1350.0, 0),
        ];
        let svg = t.to_svg();
        for want in [
            "time (ms)",
            ">0<",
            ">2<",
            "reads + uploads",
            "kernel recording",
            "waiting for the GPU",
            "staging stalls: none",
            "0 staging stalls",
            "3.00 MiB",
        ] {
            assert!(svg.contains(want), "{want}: {svg}");
        }
        assert!(!svg.contains("#e15759"), "no red without a stall");
        t.events
            .push(event(Lane::Stall, "ring slot busy", 300.0, 200.0, 0));
        let svg = t.to_svg();
        assert!(
            svg.contains("#e15759") && svg.contains("1 staging stall<"),
            "{svg}"
        );
        assert!(!svg.contains("staging stalls: none"));
    }

    #[test]
    fn ticks_are_one_two_five() {
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(trim_ms(0.5), "0.5");
        assert_eq!(trim_ms(12.0), "12");
    }
}
