// swift-tools-version:6.0
// RetryingOperationPostgreSQL: a shared queue of persistent operations on PostgreSQL, worked by
// many processes on many hosts (claims with leases, fencing, crash-loop protection across the
// fleet). A package of its own, so that the libraries stay free of dependencies: only an app
// that wants PostgreSQL resolves postgres-nio. From the repository root:
//
//     swift test --package-path Integrations/PostgreSQL
//
// The tests start a throwaway PostgreSQL cluster of their own (`initdb` into a temporary
// directory, on a free port); they need PostgreSQL's server programs (`initdb`, `pg_ctl`).
import PackageDescription

let package = Package(
    name: "RetryingOperationPostgreSQL",
    platforms: [.macOS(.v13)],
    products: [
        .library(name: "RetryingOperationPostgreSQL", targets: ["RetryingOperationPostgreSQL"]),
    ],
    dependencies: [
        .package(name: "RetryingOperation", path: "../.."),
        .package(url: "https://github.com/vapor/postgres-nio.git", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
    ],
    targets: [
        .target(
            name: "RetryingOperationPostgreSQL",
            dependencies: [
                .product(name: "PersistentOperations", package: "RetryingOperation"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // One worker process of the fleet chaos test (FleetChaosTests): not a product.
        .executableTarget(
            name: "FleetChaosWorker",
            dependencies: [
                "RetryingOperationPostgreSQL",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(
            name: "RetryingOperationPostgreSQLTests",
            dependencies: ["RetryingOperationPostgreSQL"]
        ),
    ],
    swiftLanguageModes: [.v6]
)
