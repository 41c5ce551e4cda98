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
        // The effects journal, the at-least-once rules and the seeded generator, shared by
        // crash-demo and the tests (not a product).
        .target(name: "CrashHarness"),
        .executableTarget(name: "CrashDemo", dependencies: ["PersistentOperations", "CrashHarness"]),
        .executableTarget(name: "StoreInspector", dependencies: ["PersistentOperations"]),
        .testTarget(name: "RetryingOperationTests", dependencies: ["RetryingOperation", "CrashHarness"]),
        .testTarget(
            name: "PersistentOperationsTests",
            dependencies: ["PersistentOperations", "CrashHarness"],
            resources: [.copy("Fixtures")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
