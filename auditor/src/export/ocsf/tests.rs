use super::*;

#[test]
fn a_command_line_quotes_what_a_shell_would_split() {
    let argv = ["sh", "-c", "echo it's here", ""];
    assert_eq!(command_line(argv.iter()), r#"sh -c 'echo it'\''s here' ''"#);
}
