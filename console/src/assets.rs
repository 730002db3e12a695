//! The page, its script, style and icon, compiled in by `build.rs`.

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// The asset called `name` (a file name in `console/assets/`), with its
/// content type.
pub(crate) fn find(name: &str) -> Option<(&'static str, &'static [u8])> {
    let (_, bytes) = ASSETS.iter().find(|(n, _)| *n == name)?;
    Some((content_type(name), bytes))
}

fn content_type(name: &str) -> &'static str {
    match name.rsplit_once('.').map(|(_, ext)| ext) {
        Some("html") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("css") => "text/css; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        Some("json") => "application/json",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_page_and_its_script_are_built_in() {
        let (ty, page) = super::find("index.html").expect("index.html");
        assert!(ty.starts_with("text/html"));
        let page = String::from_utf8_lossy(page);
        // The CSP forbids inline script and style: the page must not need them.
        assert!(!page.contains("<script>"), "inline script in index.html");
        assert!(!page.contains("style="), "inline style in index.html");
        assert!(
            !page.contains("<style"),
            "inline style element in index.html"
        );
        assert!(super::find("../Cargo.toml").is_none());
    }
}
