import Foundation
import Testing
import PersistentOperations

// The code samples of the README's persistence section and of the PersistentOperations
// DocC articles, compiled and run here so they cannot rot. `scripts/readme-snippets.py
// --check` fails when a sample differs from its `// snippet:` region below.

// snippet: persistent-operation
struct Upload: Codable, Sendable {
    var file: String
    var album: Int
}

final class PersistentUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest of the state belongs to RetryingOperation.
    static let persistenceIdentifier = "com.example.upload"   // stored on disk: never change it
    let payload: Upload

    init(payload: Upload) {
        self.payload = payload
        super.init()
        retryPolicy = .persistent
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        // isRetry is true after a crash too: the server may already have this file.
        DocumentationServer.upload(payload.file, replacingPartialUpload: isRetry) { error in
            if let error {
                self.baseOperationEnded(withRetriableError: error)
            } else {
                self.baseOperationEnded()
            }
        }
    }
}
// end snippet

/// A stand-in for a real upload service.
enum DocumentationServer {
    static let uploaded = Locked<[String]>([])

    static func upload(_ file: String, replacingPartialUpload: Bool, completion: @escaping @Sendable ((any Error)?) -> Void) {
        uploaded.withLock { $0.append(file) }
        DispatchQueue.global().async { completion(nil) }
    }
}

@Suite("Documentation examples (persistence)", .timeLimit(.minutes(1)))
struct PersistenceDocumentationTests {
    @Test func theLaunchSequenceOfTheArticleRestoresThenAdds() async throws {
        let temporary = try TemporaryDirectory()
        let storeURL = temporary.store
        // snippet: persistent-queue-launch
        let queue = try PersistentOperationQueue(directory: storeURL)
        queue.register(PersistentUpload.self)            // every type, before restoring
        let report = try queue.restore()                 // what the last run left pending
        for entry in report.quarantined {
            print("quarantined \(entry.name): \(entry.reason)")
        }
        try queue.addOperation(PersistentUpload(payload: Upload(file: "IMG_0001.heic", album: 42)))
        // end snippet
        await queue.allOperationsFinished()
        #expect(report.restored.isEmpty)
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_0001.heic") })
        #expect(try queue.counts().pending == 0)
    }

    @Test func optionsTagsAndUniqueKeysWorkAsTheArticleShows() async throws {
        let temporary = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
        queue.register(PersistentUpload.self)
        let upload = Upload(file: "IMG_0002.heic", album: 7)
        // snippet: persistent-queue-options
        let result = try queue.addOperation(
            PersistentUpload(payload: upload),
            options: EnqueueOptions(
                notBefore: Date().addingTimeInterval(60),   // not before a minute from now
                tags: ["album:\(upload.album)"],            // to find or cancel it by tag
                uniqueKey: upload.file                      // at most one pending upload per file
            )
        )
        print("stored as \(result.id)")
        queue.cancelOperations(taggedWith: "album:7")     // the album was deleted
        // end snippet
        await queue.allOperationsFinished()
        #expect(result.disposition == .added)
        #expect(try queue.counts().pending == 0)
        #expect(!DocumentationServer.uploaded.withLock { $0.contains("IMG_0002.heic") })
    }

    @Test func aRequestDeliveredTwiceIsStoredOnceAsTheReadmeShows() async throws {
        let temporary = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(directory: temporary.store)
        queue.register(PersistentUpload.self)
        struct Request { var id: String; var files: [String] }
        let request = Request(id: "7f3a", files: ["IMG_0003.heic", "IMG_0004.heic"])
        func handle(_ request: Request) throws -> [PersistentOperationID] {
            // snippet: idempotency-key
            // A request the producer may send again when its acknowledgement is lost:
            // its id names the work, and a repeat within the window stores nothing.
            let uploads = request.files.map { PersistentUpload(payload: Upload(file: $0, album: 42)) }
            let ids = try queue.addOperations(uploads, options: EnqueueOptions(idempotencyKey: "request-\(request.id)"))
            // end snippet
            return ids
        }
        let first = try handle(request)
        await queue.allOperationsFinished()
        let again = try handle(request)
        await queue.allOperationsFinished()
        #expect(again == first)
        #expect(DocumentationServer.uploaded.withLock { $0.filter { $0 == "IMG_0003.heic" }.count } == 1)
    }
}

/// The album of the operation-graph examples.
struct Album: Codable, Sendable {
    var id: Int
    var title: String
}

/// One step of an album's life on the documentation server; the server's log names it.
class AlbumStep: RetryingOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest of the state belongs to RetryingOperation.
    let payload: Album
    init(payload: Album) {
        self.payload = payload
        super.init()
    }
    class var verb: String { fatalError("a subclass names its step") }
    override var isAsynchronous: Bool { false }
    override func startBaseOperation(isRetry: Bool) {
        DocumentationServer.uploaded.withLock { $0.append("\(Self.verb) album \(payload.id)") }
        baseOperationEnded()
    }
}

/// Creates an album (an example prerequisite).
final class CreateAlbum: AlbumStep, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.create-album"
    override class var verb: String { "create" }
}

/// Publishes an album once its photos are up (an example dependent).
final class PublishAlbum: AlbumStep, PersistentOperation, @unchecked Sendable {
    static let persistenceIdentifier = "com.example.publish-album"
    override class var verb: String { "publish" }
}

@Suite("Documentation examples (operation graphs)", .timeLimit(.minutes(1)))
struct OperationGraphDocumentationTests {
    @Test func theAlbumGraphOfTheArticleRunsInOrder() async throws {
        let temporary = try TemporaryDirectory()
        let queue = try PersistentOperationQueue(directory: temporary.store)
        queue.register(PersistentUpload.self)
        queue.register(CreateAlbum.self)
        queue.register(PublishAlbum.self)
        // snippet: operation-graph
        let album = CreateAlbum(payload: Album(id: 77, title: "Hike"))
        let uploads = ["IMG_7701.heic", "IMG_7702.heic"].map {
            PersistentUpload(payload: Upload(file: $0, album: 77))
        }
        let publish = PublishAlbum(payload: Album(id: 77, title: "Hike"))
        for upload in uploads {
            upload.addDependency(album)          // as with any OperationQueue
            publish.addDependency(upload)
        }
        try queue.addOperations([album] + uploads + [publish])   // stored all or none
        // end snippet
        await queue.allOperationsFinished()
        let log = DocumentationServer.uploaded.withLock { $0 }
        let created = try #require(log.firstIndex(of: "create album 77"))
        let published = try #require(log.firstIndex(of: "publish album 77"))
        for file in ["IMG_7701.heic", "IMG_7702.heic"] {
            let uploaded = try #require(log.firstIndex(of: file))
            #expect(created < uploaded && uploaded < published)
        }
    }

    @Test func aLaterAddCanDependOnAStoredOperation() async throws {
        let temporary = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
        queue.register(PersistentUpload.self)
        queue.register(CreateAlbum.self)
        let album = CreateAlbum(payload: Album(id: 78, title: "Beach"))
        try queue.addOperation(album)
        // snippet: operation-graph-later
        let upload = PersistentUpload(payload: Upload(file: "IMG_7801.heic", album: 78))
        upload.addDependency(album)              // `album` was added earlier
        try queue.addOperation(upload)
        let info = queue.operation(withID: queue.identifier(of: upload)!)
        print(info?.state == .waitingForPrerequisites)   // true until `album` succeeds
        // end snippet
        #expect(info?.state == .waitingForPrerequisites)
        operationQueue.isSuspended = false
        await queue.allOperationsFinished()
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_7801.heic") })
    }
}
