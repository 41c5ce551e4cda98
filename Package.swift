// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "RetryingOperation",
    platforms: [.macOS(.v10_15), .iOS(.v13), .tvOS(.v13), .watchOS(.v6)],
    products: [
        .library(name: "RetryingOperation", targets: ["RetryingOperation"]),
        .library(name: "PersistentOperations", targets: ["PersistentOperations"]),
        .executable(name: "crash-demo", targets: ["CrashDemo"]),
        .executable(name: "store-inspector", targets: ["StoreInspector"]),
    ],
    targets: [
        .target(name: "RetryingOperation"),
        .target(name: "PersistentOperations", dependencies: ["RetryingOperation"]),
        .executableTarget(name: "CrashDemo", dependencies: ["PersistentOperations"]),
        .executableTarget(name: "StoreInspector", dependencies: ["PersistentOperations"]),
        .testTarget(name: "RetryingOperationTests", dependencies: ["RetryingOperation"]),
        .testTarget(
            name: "PersistentOperationsTests",
            dependencies: ["PersistentOperations"],
            resources: [.copy("Fixtures")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
