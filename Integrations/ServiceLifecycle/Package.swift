// swift-tools-version:6.0
// PersistentOperationsServiceLifecycle: a PersistentOperationQueue as a swift-service-lifecycle
// `Service`, shut down gracefully on SIGTERM. A package of its own, so that the libraries stay
// free of dependencies. From the repository root:
//
//     swift test --package-path Integrations/ServiceLifecycle
import PackageDescription

let package = Package(
    name: "PersistentOperationsServiceLifecycle",
    platforms: [.macOS(.v10_15)],
    products: [
        .library(name: "PersistentOperationsServiceLifecycle", targets: ["PersistentOperationsServiceLifecycle"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: "../.."),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
    ],
    targets: [
        .target(
            name: "PersistentOperationsServiceLifecycle",
            dependencies: [
                .product(name: "PersistentOperations", package: "RetryingOperation"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        .testTarget(
            name: "PersistentOperationsServiceLifecycleTests",
            dependencies: [
                "PersistentOperationsServiceLifecycle",
                .product(name: "PersistentOperations", package: "RetryingOperation"),
                .product(name: "RetryingOperation", package: "RetryingOperation"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
