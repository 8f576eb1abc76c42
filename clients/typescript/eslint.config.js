// ESLint (npm run lint, part of npm test): ESLint's recommended rules, and
// typescript-eslint's recommended type-checked rules on src/, test/ and
// bench/ (the program of tsconfig.json, read through TypeScript 6's API: the
// "typescript" devDependency; the build compiles with TypeScript 7). The
// configuration files and scripts/ are plain ESM that Node runs as they are.
import js from "@eslint/js";
import { defineConfig, globalIgnores } from "eslint/config";
import tseslint from "typescript-eslint";

export default defineConfig(
  globalIgnores(["dist/", "api-docs/", "node_modules/"]),
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // node:test's test() returns a promise that the runner itself awaits;
      // every other floating promise is an error.
      "@typescript-eslint/no-floating-promises": ["error", {
        allowForKnownSafeCalls: [{ from: "package", package: "node:test", name: ["test", "describe", "it", "suite"] }],
      }],
      // An async function without await is how this code implements a
      // promise-returning contract (Store, the fakes of the tests): a throw
      // becomes a rejection, as the caller of an async call expects, where a
      // hand-written Promise.resolve() would throw synchronously.
      "@typescript-eslint/require-await": "off",
    },
  },
  {
    files: ["**/*.js", "**/*.mjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: {
      // The Node globals scripts/ uses (no dependency for a list of four).
      globals: { Buffer: "readonly", URL: "readonly", console: "readonly", process: "readonly" },
    },
  },
);
