//! Writes a report of the given boot logs: `cargo run -p analyze --example report --
//! [--config FILE] [--format text|json|svg|html] LOG...` (text on stdout by default).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut format = "text".to_string();
    let mut config = None;
    let mut logs = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--format" => format = args.next().ok_or("--format needs a value")?,
            "--config" => config = Some(PathBuf::from(args.next().ok_or("--config needs a file")?)),
            _ => logs.push(PathBuf::from(arg)),
        }
    }
    let report = analyze::analyze_files(&logs, config.as_deref())?;
    let out = match format.as_str() {
        "json" => report.to_json()?,
        "svg" => report.to_svg(),
        "html" => report.to_html(),
        _ => report.to_text(),
    };
    print!("{out}");
    Ok(())
}
