//! A Dockerfile parser, as much of the format as the deployment tests
//! need: instructions with continuations and comments, stages, ARG
//! substitution, flags, exec form and the simple commands of a RUN.

use std::collections::BTreeMap;

use super::*;

#[derive(Debug, Clone)]
pub struct Instruction {
    pub line: usize,
    pub keyword: String,
    pub args: String,
}

#[derive(Debug)]
pub struct Stage {
    /// The image, build arguments substituted.
    pub base: String,
    pub name: Option<String>,
    pub instructions: Vec<Instruction>,
}

#[derive(Debug)]
pub struct Dockerfile {
    /// ARGs before the first FROM, with their defaults.
    pub args: BTreeMap<String, String>,
    pub stages: Vec<Stage>,
}

const KEYWORDS: &[&str] = &[
    "ADD",
    "ARG",
    "CMD",
    "COPY",
    "ENTRYPOINT",
    "ENV",
    "EXPOSE",
    "FROM",
    "HEALTHCHECK",
    "LABEL",
    "MAINTAINER",
    "ONBUILD",
    "RUN",
    "SHELL",
    "STOPSIGNAL",
    "USER",
    "VOLUME",
    "WORKDIR",
];

/// Splits the file into instructions: comment lines dropped (also
/// inside a continuation, as Docker does), lines ending in `\` joined
/// to the next.
pub fn instructions(text: &str) -> Result<Vec<Instruction>, String> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    let mut directives = true;
    for (i, raw) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = raw.trim();
        if let Some(comment) = trimmed.strip_prefix('#') {
            if directives {
                let directive = comment.trim().to_ascii_lowercase();
                if directive.starts_with("escape") && directive.contains('=') {
                    return Err(format!(
                        "line {n}: the escape directive is not supported here"
                    ));
                }
            }
            continue;
        }
        directives = false;
        if trimmed.is_empty() {
            continue;
        }
        let (start, mut acc) = pending.take().unwrap_or((n, String::new()));
        let body = if acc.is_empty() {
            raw.trim()
        } else {
            raw.trim_end()
        };
        if let Some(head) = body.strip_suffix('\\') {
            acc.push_str(head);
            pending = Some((start, acc));
            continue;
        }
        acc.push_str(body);
        let (keyword, args) = acc
            .split_once(char::is_whitespace)
            .unwrap_or((acc.as_str(), ""));
        let keyword = keyword.to_ascii_uppercase();
        if !KEYWORDS.contains(&keyword.as_str()) {
            return Err(format!("line {start}: unknown instruction {keyword:?}"));
        }
        out.push(Instruction {
            line: start,
            keyword,
            args: args.trim().to_string(),
        });
    }
    match pending {
        Some((start, _)) => Err(format!(
            "the instruction at line {start} ends in a line continuation"
        )),
        None => Ok(out),
    }
}

/// `${NAME}` and `$NAME` replaced from `vars`; an unknown name is an
/// error.
pub fn substitute(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced
                .find('}')
                .ok_or_else(|| format!("unclosed ${{ in {s:?}"))?;
            (&braced[..end], &braced[end + 1..])
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        let value = vars
            .get(name)
            .ok_or_else(|| format!("{s:?} uses ${name}, which no ARG defines"))?;
        out.push_str(value);
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

pub fn parse(text: &str) -> Result<Dockerfile, String> {
    let mut args = BTreeMap::new();
    let mut stages: Vec<Stage> = Vec::new();
    for ins in instructions(text)? {
        match (ins.keyword.as_str(), stages.last_mut()) {
            ("FROM", _) => {
                let (_flags, rest) = flags(&ins.args);
                let words: Vec<&str> = rest.split_whitespace().collect();
                let (image, name) = match words.as_slice() {
                    [image] => (*image, None),
                    [image, as_, name] if as_.eq_ignore_ascii_case("as") => {
                        (*image, Some(name.to_string()))
                    }
                    _ => return Err(format!("line {}: bad FROM {:?}", ins.line, ins.args)),
                };
                stages.push(Stage {
                    base: substitute(image, &args)?,
                    name,
                    instructions: Vec::new(),
                });
            }
            ("ARG", None) => {
                let (name, default) = ins.args.split_once('=').unwrap_or((&ins.args, ""));
                args.insert(name.trim().to_string(), default.trim().to_string());
            }
            (_, None) => {
                return Err(format!(
                    "line {}: {} before the first FROM",
                    ins.line, ins.keyword
                ))
            }
            (_, Some(stage)) => stage.instructions.push(ins),
        }
    }
    if stages.is_empty() {
        return Err("no FROM".into());
    }
    Ok(Dockerfile { args, stages })
}

/// Leading `--name=value` flags, and the rest of the arguments.
pub fn flags(args: &str) -> (BTreeMap<String, String>, &str) {
    let mut out = BTreeMap::new();
    let mut rest = args.trim_start();
    while rest.starts_with("--") {
        let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (name, value) = rest[2..end].split_once('=').unwrap_or((&rest[2..end], ""));
        out.insert(name.to_string(), value.to_string());
        rest = rest[end..].trim_start();
    }
    (out, rest)
}

/// The JSON array of the exec form, or None for the shell form.
pub fn exec_form(args: &str) -> Option<Vec<String>> {
    let args = args.trim();
    if !args.starts_with('[') {
        return None;
    }
    serde_json::from_str(args).ok()
}

/// A shell command line split into simple commands at `&&`, `||`, `;`,
/// `|` and newlines outside quotes, each split into words with quotes
/// removed; `>` and `<` become words of their own.
pub fn simple_commands(script: &str) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = script.chars().peekable();
    let end_word = |word: &mut Option<String>, words: &mut Vec<String>| {
        if let Some(w) = word.take() {
            words.push(w);
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => {
                            if let Some(n) = chars.next() {
                                w.push(n)
                            }
                        }
                        c => w.push(c),
                    }
                }
            }
            '\\' => {
                if let Some(n) = chars.next() {
                    word.get_or_insert_with(String::new).push(n)
                }
            }
            '&' | '|' | ';' | '\n' => {
                if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                    chars.next();
                }
                end_word(&mut word, &mut words);
                if !words.is_empty() {
                    commands.push(std::mem::take(&mut words));
                }
            }
            '>' | '<' => {
                end_word(&mut word, &mut words);
                words.push(c.to_string());
            }
            // A comment runs to the end of the line.
            '#' if word.is_none() => {
                while chars.peek().is_some_and(|&c| c != '\n') {
                    chars.next();
                }
            }
            c if c.is_whitespace() => end_word(&mut word, &mut words),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    end_word(&mut word, &mut words);
    if !words.is_empty() {
        commands.push(words);
    }
    commands
}

#[test]
fn dockerfile_parser_handles_continuations_comments_and_stages() {
    let text = "# syntax=docker/dockerfile:1\nARG V=1.2\nARG D=deb\n\
                FROM img:${V}-$D AS one\n\
                RUN a \\\n  # dropped\n  && b\n\
                from other\nCOPY --from=one /x /y\n";
    let df = dockerfile::parse(text).unwrap();
    assert_eq!(df.stages.len(), 2);
    assert_eq!(df.stages[0].base, "img:1.2-deb");
    assert_eq!(df.stages[0].name.as_deref(), Some("one"));
    let run = &df.stages[0].instructions[0];
    assert_eq!(
        (run.keyword.as_str(), run.args.as_str()),
        ("RUN", "a   && b")
    );
    assert_eq!(run.line, 5);
    let copy = &df.stages[1].instructions[0];
    let (flags, rest) = dockerfile::flags(&copy.args);
    assert_eq!(flags.get("from").map(String::as_str), Some("one"));
    assert_eq!(rest, "/x /y");
    assert!(dockerfile::parse("FROM a\nRUN x \\\n").is_err());
    assert!(dockerfile::parse("FROM a\nRUNN x\n").is_err());
    assert!(dockerfile::parse("FROM a:$NOPE\n").is_err());
    assert!(dockerfile::parse("RUN x\nFROM a\n").is_err());
    assert_eq!(
        dockerfile::simple_commands("# it's\nx a#b # c\n"),
        vec![vec!["x", "a#b"]]
    );
    assert_eq!(
        dockerfile::simple_commands("mkdir -p s && echo 'fn main() {}' > s/m.rs; x \"a b\"|y"),
        vec![
            vec!["mkdir", "-p", "s"],
            vec!["echo", "fn main() {}", ">", "s/m.rs"],
            vec!["x", "a b"],
            vec!["y"],
        ]
    );
}
