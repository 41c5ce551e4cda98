// swift-tools-version:6.0
// The benchmark suite: a package of its own, so that it never slows down the build of a
// package that depends on RetryingOperation. Run it from the repository root:
//
//     swift run -c release --package-path Benchmarks retrying-benchmarks
//
// See README.md beside this file.
import PackageDescription

let package = Package(
    name: "RetryingOperationBenchmarks",
    platforms: [.macOS(.v10_15)],
    products: [
        .executable(name: "retrying-benchmarks", targets: ["RetryingBenchmarks"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: ".."),
    ],
    targets: [
        // The system SQLite (libsqlite3-dev), the baseline the store is measured against in
        // S1–S5. Only the benchmarks link it: the libraries stay free of dependencies.
        .systemLibrary(
            name: "CSQLite",
            pkgConfig: "sqlite3",
            providers: [.apt(["libsqlite3-dev"]), .brew(["sqlite"])]
        ),
        .executableTarget(
            name: "RetryingBenchmarks",
            dependencies: [
                "CSQLite",
                .product(name: "RetryingOperation", package: "RetryingOperation"),
                .product(name: "PersistentOperations", package: "RetryingOperation"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
