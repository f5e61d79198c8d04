//! Where a view writes: a file, or standard output for `-`. The lowest
//! module of the crate: every file view writes through it and it reads no
//! other module.

use std::io::{self, BufWriter, Write};
use std::path::Path;

/// Where an output flag writes: a file, or standard output for `-`.
pub type Output = BufWriter<Box<dyn Write + Send>>;

/// Whether an output path names standard output (`-`).
pub fn is_stdout(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Opens an output: `-` is standard output, any other path is created
/// (truncated), or appended to with `append`.
pub fn open_output(path: &Path, append: bool) -> io::Result<Output> {
    let w: Box<dyn Write + Send> = if is_stdout(path) {
        Box::new(io::stdout())
    } else {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("cannot create {}: {e}", path.display())))?;
        Box::new(f)
    };
    Ok(BufWriter::with_capacity(1 << 16, w))
}
