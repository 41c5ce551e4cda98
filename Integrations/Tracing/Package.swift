// swift-tools-version:6.2
// PersistentOperationsTracing: one swift-distributed-tracing span per attempt of a
// PersistentOperationQueue's operations. A package of its own, so that the libraries stay free
// of dependencies: only an app that wants tracing resolves it. From the repository root:
//
//     swift test --package-path Integrations/Tracing
import PackageDescription

let package = Package(
    name: "PersistentOperationsTracing",
    platforms: [.macOS(.v10_15)],
    products: [
        .library(name: "PersistentOperationsTracing", targets: ["PersistentOperationsTracing"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: "../.."),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.3"),
    ],
    targets: [
        .target(
            name: "PersistentOperationsTracing",
            dependencies: [
                .product(name: "PersistentOperations", package: "RetryingOperation"),
                .product(name: "Tracing", package: "swift-distributed-tracing"),
            ]
        ),
        .testTarget(
            name: "PersistentOperationsTracingTests",
            dependencies: [
                "PersistentOperationsTracing",
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
