//! The server's own figures beside the client's: when the measured file is
//! an `llmsim bench --json` run against `llmsim serve`, it carries the
//! server's `/metrics/summary` (`llmsim_server_summary`), and `diff` shows,
//! for each latency, what the client measured, what the server observed
//! on its side of the socket (from the request's arrival to each token's
//! write) and what its engine simulated. The difference between the client
//! and the server-observed columns is the client's (and the network's)
//! overhead, which the model is not to blame for.

use std::fmt::Write;

use serde_json::Value;

use super::Comparison;

/// The section, or None when the file has no server summary.
pub fn section(measured: &Value, c: &Comparison) -> Option<String> {
    let summary = measured.get("llmsim_server_summary").filter(|s| s.is_object())?;
    let model = measured.get("model_id").and_then(Value::as_str).unwrap_or_default();
    let m = summary.get("models").and_then(|ms| ms.get(model))?;
    let mut out = String::new();
    let _ = writeln!(out, "server-side figures (llmsim serve /metrics/summary of model `{model}`, ms)");
    let _ = writeln!(
        out,
        "  {:<10} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "metric", "predicted", "client", "server obs", "server sim", "client-obs"
    );
    // The server observes TTFT, ITL and e2e; it simulates TPOT too.
    for (name, field) in [("ttft", "ttft_ms"), ("itl", "itl_ms"), ("tpot", "tpot_ms"), ("e2e", "e2e_ms")] {
        for stat in ["mean", "p50", "p90", "p99"] {
            let id = format!("{name}.{stat}");
            let row = c.rows.iter().find(|r| r.id == id);
            let pred = row.and_then(|r| r.predicted);
            let client = row.and_then(|r| r.measured);
            let obs = m.pointer(&format!("/observed/{field}/{stat}")).and_then(Value::as_f64);
            let sim = m.pointer(&format!("/simulated/{field}/{stat}")).and_then(Value::as_f64);
            let overhead = client.zip(obs).map(|(c, o)| c - o);
            let _ = writeln!(
                out,
                "  {:<10} {:>12} {:>12} {:>12} {:>12} {:>12}",
                id,
                num(pred),
                num(client),
                num(obs),
                num(sim),
                overhead.map_or_else(|| "-".into(), |v| format!("{v:+.3}"))
            );
        }
    }
    let _ = writeln!(
        out,
        "  client-obs is what the client adds (its own scheduling, parsing and the network); server obs - \
         server sim is the server's lag behind its engine"
    );
    Some(out)
}

fn num(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}
