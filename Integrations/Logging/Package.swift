// swift-tools-version:6.0
// RetryingOperationLogging: routes RetryingOperation's and PersistentOperationQueue's log
// messages to swift-log. A package of its own, so that the libraries stay free of
// dependencies: only an app that wants swift-log resolves it. From the repository root:
//
//     swift test --package-path Integrations/Logging
import PackageDescription

let package = Package(
    name: "RetryingOperationLogging",
    platforms: [.macOS(.v10_15)],
    products: [
        .library(name: "RetryingOperationLogging", targets: ["RetryingOperationLogging"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: "../.."),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
    ],
    targets: [
        .target(
            name: "RetryingOperationLogging",
            dependencies: [
                .product(name: "RetryingOperation", package: "RetryingOperation"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "RetryingOperationLoggingTests",
            dependencies: [
                "RetryingOperationLogging",
                .product(name: "PersistentOperations", package: "RetryingOperation"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
