//! A one-package index pip installs from: `/simple/airlock-demo/` links a
//! real wheel under `/files/`, whose module says `HELLO`.

use std::path::Path;
use std::process::Command;

use super::Extra;

const WHEEL: &str = "airlock_demo-0.1-py3-none-any.whl";

/// Builds the wheel with python3's zipfile (a RECORD with real hashes, as
/// pip checks them).
const BUILD_WHEEL: &str = r#"
import zipfile, sys, hashlib, base64
name = "airlock_demo-0.1-py3-none-any.whl"
files = {
    "airlock_demo/__init__.py": b"HELLO = 'installed through the airlock'\n",
    "airlock_demo-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: airlock-demo\nVersion: 0.1\n",
    "airlock_demo-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = ""
for path, data in files.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    record += f"{path},sha256={digest},{len(data)}\n"
record += "airlock_demo-0.1.dist-info/RECORD,,\n"
with zipfile.ZipFile(sys.argv[1] + "/" + name, "w") as z:
    for path, data in files.items():
        z.writestr(path, data)
    z.writestr("airlock_demo-0.1.dist-info/RECORD", record)
"#;

impl Extra {
    /// Also serve the `airlock-demo` package index; the wheel is built in
    /// `scratch`.
    pub fn with_demo_package(mut self, scratch: &Path) -> Self {
        let build = Command::new("python3")
            .arg("-c")
            .arg(BUILD_WHEEL)
            .arg(scratch)
            .output()
            .unwrap();
        assert!(build.status.success(), "building {WHEEL}: {build:?}");
        let wheel = std::fs::read(scratch.join(WHEEL)).unwrap();
        self.files.insert(
            "/simple/airlock-demo/".into(),
            (
                "text/html".into(),
                format!("<html><body><a href=\"/files/{WHEEL}\">{WHEEL}</a></body></html>")
                    .into_bytes(),
            ),
        );
        self.files.insert(
            format!("/files/{WHEEL}"),
            ("application/octet-stream".into(), wheel),
        );
        self
    }
}
