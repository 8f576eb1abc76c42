// TypeDoc builds the API reference of the three entry points (npm run docs,
// into api-docs/, git-ignored); npm test runs it with --emit none, so a
// warning fails the tests.
/** @type {Partial<import("typedoc").TypeDocOptions>} */
const config = {
  entryPoints: ["src/index.ts", "src/node.ts", "src/indexeddb.ts"],
  tsconfig: "tsconfig.json",
  out: "api-docs",
  name: "@inboxd/client",
  readme: "none",
  // Internals are reachable only from inside the package; they are not documented.
  excludeInternal: true,
  excludePrivate: true,
  // The repository's remote is no public source browser: no "Defined in" links.
  disableSources: true,
  treatWarningsAsErrors: true,
  validation: {
    // A public signature that names a type no entry point exports is a warning, so an error.
    notExported: true,
    invalidLink: true,
    rewrittenLink: true,
    notDocumented: true,
  },
  // Declarations and the methods of public classes must be documented; the
  // fields of the wire types mirror docs/protocol.md and are documented there,
  // so properties are not required (one line per JSON field would restate it).
  requiredToBeDocumented: ["Enum", "Variable", "Function", "Class", "Interface", "TypeAlias", "Method", "Accessor"],
};

export default config;
