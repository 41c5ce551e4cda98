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
        .executableTarget(
            name: "RetryingBenchmarks",
            dependencies: [
                .product(name: "RetryingOperation", package: "RetryingOperation"),
                .product(name: "PersistentOperations", package: "RetryingOperation"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
