// swift-tools-version:6.0
// PersistentOperationsMetrics: reports a PersistentOperationQueue's attempts, outcomes,
// durations and backlog to swift-metrics. A package of its own, so that the libraries stay
// free of dependencies: only an app that wants swift-metrics resolves it. From the repository
// root:
//
//     swift test --package-path Integrations/Metrics
//     swift run -c release --package-path Integrations/Metrics metrics-overhead
import PackageDescription

let package = Package(
    name: "PersistentOperationsMetrics",
    platforms: [.macOS(.v10_15)],
    products: [
        .library(name: "PersistentOperationsMetrics", targets: ["PersistentOperationsMetrics"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: "../.."),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.4.1"),
    ],
    targets: [
        .target(
            name: "PersistentOperationsMetrics",
            dependencies: [
                .product(name: "PersistentOperations", package: "RetryingOperation"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        .executableTarget(
            name: "metrics-overhead",
            dependencies: ["PersistentOperationsMetrics"]
        ),
        .testTarget(
            name: "PersistentOperationsMetricsTests",
            dependencies: [
                "PersistentOperationsMetrics",
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
