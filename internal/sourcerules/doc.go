// Package sourcerules holds rules on the module's source text that the
// compiler and the layering test do not see, checked by its tests over every
// non-test Go file:
//
//   - one name per concept: no declaration re-exports another package's
//     name (`type X = pkg.Y`, `const X = pkg.Y`, `var X = pkg.Y`); users
//     write the defining package's name;
//   - comments say why: no comment block over 25 lines outside doc.go, and
//     no comment outside a test names a test function (history belongs in
//     commit messages and CHANGELOG.md).
//
// It has no code of its own; the rules are its tests.
package sourcerules
