//! Builds the table of the console's assets: every file in `assets/` is
//! compiled into the binary, so the console needs no network and no files
//! beside the binary, and a new asset needs no code change.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    let dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo")).join("assets");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("console/assets/ exists")
        .map(|entry| entry.expect("readable console/assets/"))
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .map(|entry| entry.file_name().into_string().expect("UTF-8 asset names"))
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort();
    let mut table = String::from("pub(crate) static ASSETS: &[(&str, &[u8])] = &[\n");
    for name in &names {
        let path = dir.join(name);
        println!("cargo:rerun-if-changed={}", path.display());
        writeln!(
            table,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    table.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("assets.rs");
    std::fs::write(out, table).expect("writable OUT_DIR");
}
